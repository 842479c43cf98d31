//! X3 (issue 32, item 1): a drain is final. A root whose turn the drain cuts while its child is
//! still running must not be woken into a new turn by that child's disposal notice: the notice
//! is recorded in the root's log, no `turn/start` follows the drain, and the drain answers at
//! once instead of waiting behind a turn the notice started (before the fix: 45 s, and the
//! root replied "late turn after drain"). Scripted agents, three real nodes, a real
//! nats-server.

use std::time::{Duration, Instant};

use lineage_testkit::prelude::*;
use serde_json::json;

#[test]
fn x3_a_drained_root_takes_no_turn_on_its_childs_disposal_notice() {
    let c = Cluster::start(3);
    // Turn 0: spawn a continuable child that sleeps, then sleep (the drain cuts this turn).
    // Turn 1 (what a wrongly woken root would run): sleep 45 s, then reply.
    let script = json!({"turns": [
        [
            {"do": "spawn", "shape": "continuable", "prompt": "work", "node": "node-2",
             "agent": {"driver": "script", "script": {"turns": [[{"do": "sleep", "ms": 45000}]]}}},
            {"do": "sleep", "ms": 45000}
        ],
        [
            {"do": "sleep", "ms": 45000},
            {"do": "reply", "content": "late turn after drain"}
        ]
    ]});
    let root = c.spawn_root("node-1", &script);
    let child = wait_for(Duration::from_secs(30), "the child is live", || {
        let tree = c.tree(&root);
        let child = tree
            .iter()
            .find(|r| r["session"] != root.as_str() && r["live"] == true)?;
        Some(child["session"].as_str()?.to_owned())
    });

    let started = Instant::now();
    let report = c.cli_json(&["drain", &root]);
    let took = started.elapsed();
    assert_eq!(
        report["closed"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );
    assert!(
        report["warnings"].as_array().is_some_and(Vec::is_empty),
        "{report}"
    );
    // Not behind a 45 s turn: the release of a stopped root waits for nothing.
    assert!(
        took < Duration::from_secs(20),
        "the drain took {took:?}: it waited behind a turn started after it: {report}"
    );
    for session in [&root, &child] {
        assert_eq!(c.row(&root, session)["state"], "disposed", "{session}");
    }

    // The root's log: one turn; no turn started for what arrived after the drain's stop.
    std::thread::sleep(Duration::from_secs(2));
    let log = c.log(&root);
    let kinds: Vec<&str> = log.iter().map(|e| e.kind.as_str()).collect();
    let turns = kinds.iter().filter(|k| **k == "turn/start").count();
    assert_eq!(turns, 1, "a turn started after the drain: {kinds:?}");
    // The child's disposal notice, when it came before the release, is recorded only.
    let notices = log
        .iter()
        .filter(|e| e.kind == "inbox/accepted" && e.data.to_string().contains(child.as_str()))
        .count();
    assert!(notices <= 1, "{kinds:?}");
    assert!(
        !log.iter()
            .any(|e| e.kind == "turn/assistant"
                && e.data.to_string().contains("late turn after drain")),
        "the root ran a turn after the drain: {kinds:?}"
    );
}
