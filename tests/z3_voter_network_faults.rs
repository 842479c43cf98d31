//! Issue 12 (G1, Z3, S1, X2): network faults between the registry's voters and NATS, through a
//! real proxy (toxiproxy); issue 35: the same faults on the voters' direct Raft links. Each of the three voters reaches nats-server only through a proxy of
//! its own; worker node-4 reaches it directly and hosts a root whose one-shot children the test
//! spawns through the CLI, with request ids, while one voter at a time (the leader or a
//! follower, by the schedule) has its link slowed (300 ± 100 ms both ways), blackholed (a
//! partition: bytes stop both ways, the sockets stay open), reset (every connection reset as
//! soon as data flows) or cut (connections refused), each for at least 3 s and healed before
//! the next. Every spawn is a registry write; a blackholed or reset leader means an election.
//!
//! Checked once the faults heal: every node is ready again within a bound; a spawn the CLI did
//! not acknowledge is sent again with its request id and then succeeds; every request id names
//! exactly one child (none born twice, none lost); every child ran and was disposed (none left
//! `running`); every acknowledged reply named the child the tree holds. Printed: per fault, the
//! spawns, the slowest one and how many the CLI gave up on (the unavailability a client saw).
//!
//! Skipped (with a message, the test passes) only when toxiproxy-server is not installed and
//! `go install` cannot install it.
//!
//! The second test gives the voters direct Raft links (`[registry.direct]`, switched on one
//! voter at a time, a quorum up throughout), each link from voter i to voter j through a proxy
//! of its own, and checks first that no Raft RPC crosses NATS any more; a fault on a voter then
//! takes all of its links (both directions), while its NATS connection stays up: the registry's
//! writes still reach it, only its Raft traffic is hit (the slow-leader case of check-quorum).

#[path = "z3_voter_network_faults/schedule.rs"]
mod schedule;

use std::collections::BTreeMap;
use std::time::Duration;

use lineage_testkit::prelude::*;
use lineage_testkit::toxiproxy::Toxiproxy;
use schedule::{leader_index, run_schedule};

#[test]
fn z3_g1_a_voter_slowed_partitioned_reset_or_cut_from_nats_loses_no_acknowledged_spawn() {
    let Some(proxy) = Toxiproxy::start_or_skip() else {
        return;
    };
    let mut c = Cluster::start(3);
    let upstream = c.nats.url().trim_start_matches("nats://").to_owned();
    // Each voter through its own proxy, restarted one at a time (a quorum stays up).
    for i in 0..3 {
        let listen = proxy.proxy_to(&format!("voter-{}", i + 1), &upstream);
        c.nodes[i].kill();
        c.nodes[i].spawn(&format!("nats://127.0.0.1:{listen}"));
        c.wait_ready(Duration::from_secs(60));
    }
    run_schedule(
        &mut c,
        &proxy,
        &|i| vec![format!("voter-{}", i + 1)],
        "voter to NATS",
    );
}

/// The proxy that carries voter `from`'s link to voter `to` (0-based).
fn link(from: usize, to: usize) -> String {
    format!("raft-{}-{}", from + 1, to + 1)
}

#[test]
fn z3_g1_direct_raft_links_slowed_partitioned_reset_or_cut_lose_no_acknowledged_spawn() {
    let Some(proxy) = Toxiproxy::start_or_skip() else {
        return;
    };
    let mut c = Cluster::start(3);
    let held: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let listen: Vec<u16> = held
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    drop(held);
    let token = c.dir.path().join("raft-token");
    std::fs::write(&token, "a-token-for-the-direct-raft-links-of-this-test\n").unwrap();
    let mut via = BTreeMap::new();
    for from in 0..3 {
        for to in (0..3).filter(|to| *to != from) {
            let port = proxy.proxy_to(&link(from, to), &format!("127.0.0.1:{}", listen[to]));
            via.insert((from, to), port);
        }
    }
    // Switched on one voter at a time: a voter on direct links still answers Raft on NATS, so
    // the group keeps a quorum while the others are restarted.
    let url = c.nats.url();
    for i in 0..3 {
        let peers: Vec<String> = (0..3)
            .filter(|to| *to != i)
            .map(|to| format!("{} = \"127.0.0.1:{}\"", to + 1, via[&(i, to)]))
            .collect();
        let section = format!(
            "\n[registry.direct]\nlisten = \"127.0.0.1:{}\"\npeers = {{ {} }}\ntoken_file = {:?}\n",
            listen[i],
            peers.join(", "),
            token.display().to_string()
        );
        let mut config = std::fs::read_to_string(&c.nodes[i].config).unwrap();
        config.push_str(&section);
        std::fs::write(&c.nodes[i].config, config).unwrap();
        c.nodes[i].kill();
        c.nodes[i].spawn(&url);
        c.wait_ready(Duration::from_secs(60));
    }
    leader_index(&c);
    assert_eq!(
        raft_rpcs_on_nats(&c, Duration::from_secs(2)),
        0,
        "the voters still send Raft RPCs through NATS"
    );
    run_schedule(
        &mut c,
        &proxy,
        &|i| {
            (0..3)
                .filter(|j| *j != i)
                .flat_map(|j| [link(i, j), link(j, i)])
                .collect()
        },
        "direct Raft links",
    );
}

/// How many Raft RPCs cross NATS in `within` (the registry heartbeats every 50 ms, so a group
/// whose Raft is on NATS sends dozens).
fn raft_rpcs_on_nats(c: &Cluster, within: Duration) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use futures::StreamExt;
        let client = async_nats::connect(c.nats.url()).await.unwrap();
        let mut sub = client
            .subscribe(format!("lineage.{}.raft.>", c.cluster))
            .await
            .unwrap();
        let mut seen = 0;
        let _ = tokio::time::timeout(within, async {
            while sub.next().await.is_some() {
                seen += 1;
            }
        })
        .await;
        seen
    })
}
