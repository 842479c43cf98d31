//! T5 end to end: a spawn made through the tools is not repeated when the caller's node dies
//! mid-turn. Real nats-server, three real nodes, the ACP test agent with `tools = true`: the
//! root (on node-2) spawns a continuable child on node-3 through `spawn_subagent`, then its
//! turn hangs (`slow`); node-2 is SIGKILLed; the child settles (its notice waits in the root's
//! inbox); a followup resumes the root elsewhere, and the resumed agent makes the same call
//! again (the same arguments, as an agent replaying its plan does), possibly after a turn that
//! answered the notice. It is answered with the child the lost turn made, and no second child
//! is born.

use std::time::Duration;

use lineage_testkit::binary::delegator_profiles;
use lineage_testkit::prelude::*;
use serde_json::Value;

const T: Duration = Duration::from_secs(60);

const SPAWN: &str = r#"tool: spawn_subagent {"profile": "echo", "prompt": "keep the notes", "shape": "continuable", "label": "notes", "node": "node-3"}"#;

/// The assistant replies in a log.
fn replies(log: &[Event]) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "turn/assistant")
        .map(|e| e.data["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The child id in a `tool spawn_subagent: {...}` line.
fn spawned_child(line: &str) -> String {
    let body: Value = serde_json::from_str(
        line.strip_prefix("tool spawn_subagent: ")
            .unwrap_or_else(|| panic!("a tool error: {line}")),
    )
    .unwrap_or_else(|e| panic!("{e}: {line}"));
    body["child"].as_str().unwrap().to_owned()
}

#[test]
fn t5_a_resumed_caller_repeating_a_tool_spawn_after_its_node_died_gets_the_same_child() {
    let mut c = Cluster::start_with_toml(3, &[], &delegator_profiles());
    // The spawn, then a 10 s wait in the same turn (`slow`): node-2 dies inside it.
    let prompt = format!("{SPAWN}\nslow");
    let reply = c.spawn(&[
        "--node",
        "node-2",
        "--profile",
        "delegator",
        "--prompt",
        &prompt,
    ]);
    let root = id_of(&reply["session"]);
    let log = c.wait_log(&root, T, "the tool spawn in the log", |log| {
        log.iter().any(|e| e.kind == "subagent/spawned")
    });
    let first: Vec<String> = log
        .iter()
        .filter(|e| e.kind == "subagent/spawned")
        .filter_map(|e| e.data["child"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(first.len(), 1, "{log:?}");
    let child = first[0].clone();
    assert!(
        replies(&log).is_empty(),
        "the turn is still running: {log:?}"
    );

    c.nodes[1].kill();
    c.wait_lease("node-2", false, T);

    // The child has settled meanwhile: its notice waits in the root's inbox, so the resumed
    // root may first run a turn that answers it (and spawns nothing) before the followup's.
    c.wait_state(&root, &child, "settled", T);
    // The followup resumes the root on node-1 or node-3; its agent calls the same spawn.
    let sent = c.cli_json(&["send", &root, SPAWN]);
    assert_eq!(sent["outcome"], "resumed_and_delivered", "{sent}");
    assert_ne!(sent["node"], "node-2", "{sent}");
    let log = c.wait_log(&root, T, "the repeated call's answer", |log| {
        replies(log)
            .iter()
            .any(|r| r.contains("tool spawn_subagent"))
    });
    let text = replies(&log).join("\n");
    let line = text
        .lines()
        .find(|l| l.starts_with("tool spawn_subagent"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(spawned_child(line), child, "the same child: {text}");

    // One child in the registry, one birth in the root's log.
    let tree = c.tree(&root);
    assert_eq!(
        Cluster::children(&tree, &root),
        vec![child.clone()],
        "{tree:?}"
    );
    let births = log
        .iter()
        .filter(|e| e.kind == "subagent/spawned" && e.data["child"] != child.as_str())
        .count();
    assert_eq!(births, 0, "no other child was spawned: {log:?}");
}
