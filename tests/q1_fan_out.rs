//! Q1 on a real cluster: `limits.max_children` (here 2, from each node's environment) is
//! recorded on a tree at its root's birth and enforced by the registry at every birth. An ACP
//! agent spawning a third live child through its tools reads the refusal, with the numbers, as a
//! tool error; `lineage spawn` under the same parent exits 4 with the same one line; nothing is
//! registered for the refused births.

use std::time::Duration;

use lineage_testkit::binary::delegator_profiles;
use lineage_testkit::prelude::*;

const T: Duration = Duration::from_secs(60);

const REFUSAL: &str = "fan-out cap: this parent already has 2 live children (max_children 2); wait for one to finish (wait_for_children) or raise limits.max_children";

#[test]
fn q1_a_third_live_child_is_refused_as_a_tool_error_and_on_the_cli_with_the_numbers() {
    let c = Cluster::start_with_toml(
        3,
        &[("LINEAGE_LIMITS__MAX_CHILDREN", "2")],
        &delegator_profiles(),
    );
    let spawn = |label: &str| {
        format!(
            r#"tool: spawn_subagent {{"profile": "echo", "prompt": "{label}", "shape": "continuable", "label": "{label}", "node": "node-2"}}"#
        )
    };
    let prompt = [spawn("a"), spawn("b"), spawn("c")].join("\n");
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator",
        "--prompt",
        &prompt,
    ]);
    let root = id_of(&reply["session"]);
    let log = c.wait_log(&root, T, "the agent's reply", |log| {
        log.iter().any(|e| e.kind == "turn/assistant")
    });
    let text: Vec<String> = log
        .iter()
        .filter(|e| e.kind == "turn/assistant")
        .filter_map(|e| e.data["text"].as_str().map(str::to_owned))
        .collect();
    // The first turn's reply: one line per call (later turns answer the children's notices).
    let lines: Vec<&str> = text[0].lines().collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].starts_with("tool spawn_subagent: "), "{lines:?}");
    assert!(lines[1].starts_with("tool spawn_subagent: "), "{lines:?}");
    // Word for word, as the model reads it.
    assert_eq!(
        lines[2],
        format!("tool spawn_subagent error: node replied: registry refused: {REFUSAL}"),
        "{lines:?}"
    );

    // The same parent, through the CLI: exit 4, one line, code `refused`.
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
    assert!(err.contains(REFUSAL), "{err}");
    let tree = c.tree(&root);
    assert_eq!(Cluster::children(&tree, &root).len(), 2, "{tree:?}");
}
