//! Births that never start (issue 10, faults 2 and 3; S1, X2): a spawn whose start fails on the
//! target node leaves no record that looks alive, and a retry with the same request id is
//! refused instead of acknowledging the dead birth.

mod common;

use common::Cluster;
use serde_json::json;

#[test]
fn s1_x2_a_birth_that_never_started_is_disposed_and_its_retry_is_refused() {
    let cluster = Cluster::start(1);
    let root = cluster.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "hi"}]]}),
    );

    // A child placed on a node that does not exist, twice with one request id.
    let id = uuid::Uuid::now_v7().to_string();
    let args = [
        "spawn",
        "--parent",
        &root,
        "--node",
        "node-99",
        "--request-id",
        &id,
        "--prompt",
        "x",
    ];
    let (first, _, err1) = cluster.cli(&args);
    assert_eq!(first, 5, "the start on node-99 cannot happen: {err1}");
    let (second, out2, err2) = cluster.cli(&args);
    assert_ne!(
        second, 0,
        "a retry acknowledged a birth that never ran: {out2}"
    );
    assert!(
        err2.contains("never started") && err2.contains("new request id"),
        "{err2}"
    );
    assert!(!err2.trim().contains('\n'), "one line: {err2}");
    let tree = cluster.tree(&root);
    for row in &tree {
        if row["session"] != root.as_str() {
            assert_eq!(row["state"], "disposed", "a dead birth looks alive: {row}");
        }
    }

    // A top-level session on a missing node: no running record stays behind.
    let (code, _, err) = cluster.cli(&["spawn", "--node", "node-99", "--prompt", "x"]);
    assert_eq!(code, 5, "{err}");
    let status = cluster.cli_json(&["status"]);
    let running = status["sessions"]["running"].as_u64().unwrap_or(0);
    let waiting = status["sessions"]["waiting"].as_u64().unwrap_or(0);
    assert!(
        running + waiting <= 1,
        "only the scripted root may be live: {}",
        status["sessions"]
    );
}
