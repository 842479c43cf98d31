//! A quiet cluster's logs do not cry wolf (issue 37, item 8): three nodes left idle log no
//! ERROR line (openraft's expected RPC timeouts and unreachable members are counted on `/metrics`, not
//! logged),
//! and each JSON log line has its `message` at the top level.

use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::Value;

#[test]
fn f2_an_idle_cluster_logs_no_error_and_json_lines_carry_their_message() {
    let c = Cluster::start(3);
    // Some work, then quiet: a root that replies once.
    c.spawn_root(
        "node-1",
        &serde_json::json!({"turns": [[{"do": "reply", "content": "hi"}]]}),
    );
    std::thread::sleep(Duration::from_secs(15));
    let mut lines = 0;
    for node in &c.nodes {
        let text = std::fs::read_to_string(&node.log).unwrap_or_default();
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let entry: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not a JSON line ({e}): {line}", node.id));
            lines += 1;
            assert_ne!(entry["level"], "ERROR", "{}: {line}", node.id);
            assert!(
                entry["message"].is_string(),
                "{}: no top-level message: {line}",
                node.id
            );
        }
    }
    assert!(lines > 0, "the nodes logged nothing:\n{}", c.logs());
    // What was not logged is counted.
    let (code, page) = c.nodes[0].http_get("/metrics").expect("metrics");
    assert_eq!(code, 200);
    assert!(
        page.contains("lineage_raft_rpc_unanswered_total{lineage_node=\"node-1\"}"),
        "{page}"
    );
}
