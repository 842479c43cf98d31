//! Z2 with real `lineage` processes under the shipped permissions: voters serve a spawn end
//! to end; a worker node hosts as itself and cannot act as another node, nor inject registry
//! writes through a JetStream push consumer.

use super::*;

/// A continuable child that reports once and settles. Its turn makes more events durable one
/// by one than [`lineage_core::log::COMPACT_MIN_MESSAGES`], so the turn's end compacts its log
/// and purges the messages before the compaction (issue 35) under the node's user.
pub(crate) fn reporting_child() -> serde_json::Value {
    let mut steps =
        vec![serde_json::json!({"do": "report", "content": "half way", "delivery": "quiet"})];
    for i in 0..lineage_core::log::COMPACT_MIN_MESSAGES {
        steps.push(serde_json::json!({"do": "reply", "text": format!("step {i}")}));
    }
    steps.push(serde_json::json!({"do": "reply", "text": "child done"}));
    serde_json::json!({"turns": [steps], "after": {"do": "echo"}})
}

/// Spawn, report, settle, followup (cold resume), drain across voters under the shipped
/// permissions: node-1..3 connect as `voter`, the CLI as `operator`; nothing is refused.
pub(crate) fn spawn_end_to_end(
    cluster: &lineage_testkit::prelude::Cluster,
    root_node: &str,
    child_nodes: &[&str],
) {
    use lineage_testkit::prelude::{accepted, spawn_step, Cluster};
    let steps: Vec<serde_json::Value> = child_nodes
        .iter()
        .map(|n| spawn_step("continuable", n, "work", reporting_child()))
        .collect();
    let root = cluster.spawn_root(
        root_node,
        &serde_json::json!({"turns": [steps], "after": {"do": "echo"}}),
    );
    let log = cluster.wait_log(
        &root,
        Duration::from_secs(30),
        "every child's report and settlement",
        |log| {
            accepted(log, "subagent-settled", None).len() == child_nodes.len()
                && accepted(log, "subagent-report", None).len() == child_nodes.len()
        },
    );
    assert_eq!(
        accepted(&log, "subagent-settled", None).len(),
        child_nodes.len()
    );
    let tree = cluster.tree(&root);
    let children = Cluster::children(&tree, &root);
    assert_eq!(children.len(), child_nodes.len(), "{tree:?}");
    for child in &children {
        cluster.wait_state(&root, child, "settled", Duration::from_secs(20));
    }
    // A followup cold-resumes a settled child (log read, placement claim, inbox publish).
    let (code, out, err) = cluster.cli(&["send", &children[0], "once more"]);
    assert_eq!(code, 0, "send: {err}{out}");
    cluster.wait_log(
        &root,
        Duration::from_secs(30),
        "the resumed child's notice",
        |log| accepted(log, "subagent-settled", None).len() > child_nodes.len(),
    );
    // Drain: admission closed, released and disposed across nodes, inbox consumers deleted.
    let (code, out, err) = cluster.cli(&["--json", "drain", &root]);
    assert_eq!(code, 0, "drain: {err}{out}");
    for row in cluster.tree(&root) {
        assert_eq!(row["state"], "disposed", "{row}");
    }
    // An observer reads (tree, status) but cannot spawn.
    let (code, _, err) = cluster.cli_as("observer", &["tree", &root]);
    assert_eq!(code, 0, "observer tree: {err}");
    let (code, _, err) = cluster.cli_as("observer", &["status"]);
    assert_eq!(code, 0, "observer status: {err}");
    let (code, out, err) = cluster.cli_as(
        "observer",
        &[
            "spawn",
            "--node",
            "node-1",
            "--prompt",
            "go",
            "--script",
            "{\"turns\":[]}",
        ],
    );
    assert_ne!(code, 0, "an observer spawned: {out}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    // Nothing but the observer's spawn was refused by the server.
    let violations: Vec<String> = cluster
        .permission_violations()
        .into_iter()
        .filter(|l| !(l.contains("user:observer") && l.contains("lineage.dev.ctl.spawn")))
        .collect();
    assert!(
        violations.is_empty(),
        "the shipped permissions refused what nodes or the CLI needed:\n{}",
        violations.join("\n")
    );
    assert!(
        cluster
            .permission_violations()
            .iter()
            .any(|l| l.contains("user:observer") && l.contains("lineage.dev.ctl.spawn")),
        "the observer's spawn was not refused by the server"
    );
}

#[test]
pub(crate) fn z2_voters_serve_a_spawn_end_to_end_under_the_shipped_permissions() {
    let cluster = lineage_testkit::prelude::Cluster::start_secured(3);
    spawn_end_to_end(&cluster, "node-1", &["node-2", "node-3"]);
}

/// A fresh request id.
pub(crate) fn request_id() -> lineage_core::ids::RequestId {
    lineage_core::ids::RequestId::parse(&uuid::Uuid::now_v7().to_string()).unwrap()
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
pub(crate) fn z2_a_worker_node_hosts_as_node_4_and_cannot_act_as_another_node() {
    use lineage_core::ids::NodeId;
    use lineage_registry::{RegistryClient, RegistryError, RegistryRefusal};
    let mut cluster = lineage_testkit::prelude::Cluster::start_secured(3);
    cluster.add_worker("node-4");
    // The worker hosts a root and a child; another child is on a voter.
    spawn_end_to_end(&cluster, "node-4", &["node-1", "node-4"]);

    // The registry, through the worker's own NATS user: as itself it heartbeats; as node-1 it
    // is refused by the voters (sender_mismatch); the voters-only subjects are refused by NATS.
    let url = cluster.nats.url();
    let password = cluster.nats_password("node-4");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = UserConn::connect(&url, "node-4", Some(&password))
            .await
            .unwrap();
        let node4 = NodeId::parse("node-4").unwrap();
        let node1 = NodeId::parse("node-1").unwrap();
        let as_node4 = RegistryClient::new(conn.client.clone(), "dev").as_node(&node4);
        as_node4
            .heartbeat(request_id(), now_ms(), node4.clone(), 2_000, None)
            .await
            .expect("node-4 heartbeats as itself");
        match as_node4
            .heartbeat(request_id(), now_ms(), node1.clone(), 60_000, None)
            .await
        {
            Err(RegistryError::Refused(RegistryRefusal::SenderMismatch { sender, node })) => {
                assert_eq!((sender.as_str(), node.as_str()), ("node-4", "node-1"));
            }
            other => panic!("node-4 heartbeat as node-1: {other:?}"),
        }
        // The trusted subjects (bare `registry.write`): NATS drops them, the call times out.
        let bare =
            RegistryClient::new(conn.client.clone(), "dev").with_deadline(Duration::from_secs(3));
        let refused = bare
            .heartbeat(request_id(), now_ms(), node1.clone(), 60_000, None)
            .await;
        assert!(
            refused.is_err(),
            "node-4 wrote on the voters' subject: {refused:?}"
        );
        assert!(
            conn.violation("lineage.dev.registry.write", "publish")
                .await
                .is_some(),
            "{:?}",
            conn.errors()
        );
    });
    let worker_violations: Vec<String> = cluster
        .permission_violations()
        .into_iter()
        .filter(|l| l.contains("user:node-4") && !l.contains("z2-test-node-4"))
        .collect();
    assert!(
        worker_violations.is_empty(),
        "the worker node was refused what it needs:\n{}",
        worker_violations.join("\n")
    );
}

#[test]
/// Failed before 77c7e90: the voters served the redirected message as a trusted write.
pub(crate) fn z2_a_worker_cannot_inject_registry_writes_through_a_jetstream_push_consumer() {
    let mut cluster = lineage_testkit::prelude::Cluster::start_secured(3);
    cluster.add_worker("node-4");
    let url = cluster.nats.url();
    let password = cluster.nats_password("node-4");
    let fake = "01936c1e-7a3b-7cde-8f00-0000000000f1";
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = UserConn::connect(&url, "node-4", Some(&password)).await.unwrap();
        // Everything here is within node-4's permissions: consumers on the inbox stream
        // filtered on one (fake) parent's inbox, and a publish to that inbox. The consumers
        // deliver to the voters' subjects: the queue group `registry` on the bare write
        // subject, and each member's direct write subject (a plain subscription).
        let filter = format!("lineage.dev.parent.{fake}.inbox");
        for (name, deliver, group) in [
            ("forge-q", "lineage.dev.registry.write", Some("registry")),
            ("forge-1", "lineage.dev.registry.1.write", None),
            ("forge-2", "lineage.dev.registry.2.write", None),
            ("forge-3", "lineage.dev.registry.3.write", None),
        ] {
            let create = format!("$JS.API.CONSUMER.CREATE.LINEAGE_DEV_INBOX.{name}.{filter}");
            let mut config = serde_json::json!({"name": name, "filter_subject": filter,
                "deliver_subject": deliver, "ack_policy": "none", "deliver_policy": "all"});
            if let Some(g) = group {
                config["deliver_group"] = g.into();
            }
            let body = serde_json::json!({"stream_name": "LINEAGE_DEV_INBOX", "config": config});
            let reply = conn
                .client
                .request(create, body.to_string().into())
                .await
                .expect("consumer create");
            let text = String::from_utf8_lossy(&reply.payload).to_string();
            eprintln!("consumer {name} -> {deliver}: {}", &text[..text.len().min(160)]);
        }
        let forged = serde_json::json!({"cmd": "heartbeat", "request_id": uuid::Uuid::now_v7().to_string(),
            "at_ms": now_ms(), "node": "node-9", "lease_ms": 600_000});
        let js = async_nats::jetstream::new(conn.client.clone());
        js.publish(filter.clone(), forged.to_string().into())
            .await
            .expect("publish")
            .await
            .expect("stored in the inbox stream");
    });
    std::thread::sleep(Duration::from_secs(2));
    let status = cluster.cli_json(&["status"]);
    let nodes: Vec<String> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap_or("?").to_owned())
        .collect();
    assert!(
        !nodes.iter().any(|n| n == "node-9"),
        "a forged heartbeat for node-9 reached the registry through a push consumer: {nodes:?}"
    );
}
