//! Q3 on a real cluster: a tree born with a budget (`lineage spawn --budget-tokens`) has the
//! usage its ACP agents report summed up every ancestor by the registry; once the sum reaches
//! the budget the sweeper drains the tree, children first, with stop reason `budget`, and a
//! spawn under it is refused with the numbers (exit 4, one line). `lineage tree` shows the
//! usage per subtree.

use std::time::Duration;

use lineage_testkit::binary::delegator_profiles;
use lineage_testkit::prelude::*;

const T: Duration = Duration::from_secs(60);

/// Waits for `session`'s `n`th turn to end.
fn wait_turns(c: &Cluster, session: &str, n: usize) {
    c.wait_log(session, T, &format!("{n} turns"), |log| {
        of_kind(log, "turn/end").len() >= n
    });
}

#[test]
fn q3_a_tree_past_its_budget_is_drained_and_refuses_a_spawn_with_the_numbers() {
    let c = Cluster::start_with_toml(3, &[], &delegator_profiles());
    // The test agent reports 100 tokens in context after its first turn, 200 after its second.
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator",
        "--budget-tokens",
        "150",
        "--prompt",
        "hello",
    ]);
    let root = id_of(&reply["session"]);
    wait_turns(&c, &root, 1);
    let reply = c.spawn(&[
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--node",
        "node-2",
        "--profile",
        "delegator",
        "--label",
        "helper",
        "--prompt",
        "slow work",
    ]);
    let child = id_of(&reply["session"]);
    // The child is in its (slow) first turn; the tree holds the root's 100 of its 150.
    c.wait_log(&child, T, "the child's turn", |log| {
        !of_kind(log, "turn/start").is_empty()
    });
    let row = c.row(&root, &root);
    assert_eq!(row["subtree_usage"]["used_tokens"], 100, "{row}");
    assert_ne!(row["state"], "disposed", "{row}");
    // The root's second turn reports 200: the tree holds 200 of its 150.
    let (code, out, err) = c.cli(&["send", &root, "again"]);
    assert_eq!(code, 0, "stdout {out} stderr {err}");
    c.wait_state(&root, &root, "disposed", T);
    let after = c.tree(&root);
    let (r, k) = (
        after
            .iter()
            .find(|r| r["session"] == root.as_str())
            .unwrap(),
        after
            .iter()
            .find(|r| r["session"] == child.as_str())
            .unwrap(),
    );
    assert_eq!(k["state"], "disposed", "{after:?}");
    assert!(
        k["updated_at_ms"].as_u64() <= r["updated_at_ms"].as_u64(),
        "children first: {after:?}"
    );
    let used = r["subtree_usage"]["used_tokens"].as_u64().unwrap();
    assert!(used >= 200, "{r}");
    let log = c.log(&child);
    let ends = of_kind(&log, "turn/end");
    assert_eq!(
        ends[0].data["stop_reason"],
        "budget",
        "{}",
        render_log(&log)
    );
    let settled = of_kind(&log, "outbox/settled");
    assert_eq!(settled.len(), 1, "{}", render_log(&log));
    assert_eq!(
        settled[0].data["stop_reason"],
        "budget",
        "{}",
        render_log(&log)
    );
    assert!(
        settled[0].data["summary"]
            .as_str()
            .is_some_and(|s| s.contains("helper ran out of budget")),
        "{}",
        render_log(&log)
    );

    // A spawn under it: refused with the numbers, in one line; nothing registered.
    let (code, out, err) = c.cli(&[
        "spawn",
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--node",
        "node-3",
    ]);
    assert_eq!(code, 4, "stdout: {out}\nstderr: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "budget spent: the subtree of {root} has used {used} tokens of its budget of 150 tokens"
        )),
        "{err}"
    );
    assert_eq!(c.tree(&root).len(), 2);
    // Bad budgets are refused before anything is sent.
    for (flag, bad) in [("--budget-tokens", "0"), ("--budget-cost", "-1")] {
        let (code, _, err) = c.cli(&["spawn", "--node", "node-2", flag, bad]);
        assert_eq!(code, 2, "{flag} {bad}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(flag), "{err}");
    }
}

#[test]
fn q3_the_script_drivers_declared_cost_spends_a_cost_budget() {
    let c = Cluster::start(3);
    // The child declares 0.60 USD and keeps working; the root declares 0.50: 1.10 of 1.00.
    let child = serde_json::json!({"turns": [[
        {"do": "usage", "tokens": 10, "cost_micros": 600000, "currency": "USD"},
        {"do": "sleep", "ms": 300000}
    ]]});
    let mut spawn = spawn_step("continuable", "node-2", "work", child);
    spawn["label"] = serde_json::json!("spender");
    let root_script = serde_json::json!({"turns": [[
        spawn,
        {"do": "sleep", "ms": 500},
        {"do": "usage", "tokens": 10, "cost_micros": 500000, "currency": "USD"},
        {"do": "sleep", "ms": 300000}
    ]]});
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--budget-cost",
        "1.00",
        "--prompt",
        "go",
        "--script",
        &root_script.to_string(),
    ]);
    let root = id_of(&reply["session"]);
    c.wait_state(&root, &root, "disposed", T);
    let tree = c.tree(&root);
    assert_eq!(tree.len(), 2, "{tree:?}");
    let r = tree.iter().find(|r| r["session"] == root.as_str()).unwrap();
    assert_eq!(r["subtree_usage"]["cost_micros"]["USD"], 1_100_000, "{r}");
    let kid = Cluster::children(&tree, &root)[0].clone();
    let log = c.log(&kid);
    let ends = of_kind(&log, "turn/end");
    assert_eq!(
        ends[0].data["stop_reason"],
        "budget",
        "{}",
        render_log(&log)
    );
    let (code, _, err) = c.cli(&["spawn", "--parent", &root, "--shape", "one-shot"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("has used 1.100000 in cost of its budget of 1.000000"),
        "{err}"
    );
}
