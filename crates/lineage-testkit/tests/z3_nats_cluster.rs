//! The 3-server NATS cluster of the Z3 fault tests: routes, one JetStream meta leader, a
//! SIGKILLed server leaves a serving pair, a restarted one rejoins under its old name.

use std::time::Duration;

use lineage_testkit::NatsCluster;

#[test]
fn z3_cluster_has_routes_a_meta_leader_and_survives_a_kill_and_restart() {
    let mut c = NatsCluster::start().expect("start the NATS cluster");
    assert_eq!(c.len(), 3);
    let urls = c.urls();
    assert_eq!(urls.split(',').count(), 3, "{urls}");
    // Every server routes to the two others.
    for i in 0..3 {
        let (code, body) = lineage_testkit::http_get(c.monitor_port(i), "/routez").unwrap();
        assert_eq!(code, 200);
        let routez: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(
            routez["num_routes"].as_u64().unwrap_or(0) >= 2,
            "server {i}: {routez}"
        );
        let jsz = c.jsz(i).unwrap();
        assert_eq!(jsz["meta_cluster"]["cluster_size"], 3, "server {i}: {jsz}");
    }
    let leader = c.meta_leader(0).expect("a meta leader");
    assert!((0..3).any(|i| c.server(i).name() == leader));
    // SIGKILL the meta leader: the other two elect one of themselves.
    let victim = (0..3).find(|&i| c.server(i).name() == leader).unwrap();
    c.kill(victim);
    assert!(!c.is_running(victim));
    c.wait_ready(Duration::from_secs(30))
        .expect("the two others are healthy with a new leader");
    let other = (victim + 1) % 3;
    let new_leader = c.meta_leader(other).expect("a new meta leader");
    assert_ne!(new_leader, leader);
    // Restart: same port and name; it rejoins and agrees on the leader.
    let name = c.server(victim).name().to_owned();
    c.restart(victim).expect("restart rejoins");
    assert_eq!(c.server(victim).name(), name);
    assert_eq!(c.meta_leader(victim), c.meta_leader(other));
    let jsz = c.jsz(victim).unwrap();
    assert_eq!(jsz["meta_cluster"]["cluster_size"], 3, "{jsz}");
}
