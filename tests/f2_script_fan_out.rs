//! A script's fan-out runs in parallel (issue 37, item 4), through the CLI against a real
//! cluster: one-shot `spawn` steps with `"await": false` do not block the turn, so the children
//! run side by side, and the `await_children` after them collects their results in the turn.

use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::json;

#[test]
fn f2_one_shot_spawns_that_do_not_await_run_side_by_side_and_await_children_collects_them() {
    let c = Cluster::start(1);
    let child = |word: &str| {
        json!({"do": "spawn", "shape": "one-shot", "prompt": word, "await": false,
            "agent": agent(json!({"turns": [[{"do": "sleep", "ms": 3000},
                {"do": "reply", "content": format!("{word} done")}]]}))})
    };
    let script = json!({"turns": [[
        child("alpha"), child("beta"), child("gamma"),
        {"do": "await_children", "timeout_ms": 30000},
        {"do": "reply_result"}
    ]], "after": {"do": "echo"}})
    .to_string();
    let (code, out, err) = c.cli(&["spawn", "--prompt", "go", "--script", &script]);
    assert_eq!(code, 0, "{err}");
    let root = out.split_whitespace().nth(1).unwrap().to_owned();
    // All three at work at once: run one after another, no two would ever be live together.
    wait_for(
        Duration::from_secs(20),
        "three children in a turn at once",
        || {
            let tree = c.tree(&root);
            let working = tree
                .iter()
                .filter(|r| r["session"] != root.as_str() && r["in_turn"] == true)
                .count();
            (working == 3).then_some(())
        },
    );
    // The turn's reply is what the await collected: each child's result, one a line.
    let reply = wait_for(Duration::from_secs(30), "the root's reply", || {
        let show = c.cli_json(&["show", &root]);
        show["glance"]["last_reply"].as_str().map(str::to_owned)
    });
    let (_, logs, _) = c.cli(&["logs", &root]);
    for word in ["alpha", "beta", "gamma"] {
        assert!(
            reply.contains(&format!("{word} done")),
            "{word} in {reply:?}\n{logs}"
        );
    }
}
