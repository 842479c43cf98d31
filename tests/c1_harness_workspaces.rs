//! Issue 39 with the agents users run: a root of a real harness (its ACP adapter, the model
//! replaced by `tests/harness/model_server.py`) started in a client's files on node-1 spawns a
//! child of the same harness on node-2; the child, in a copy of its parent's files, writes a
//! file with the harness's own edit tool (Claude Code's `Write`, Codex's `apply_patch`); the
//! root's model calls `apply_child_changes` and the file is in the root's files, which its next
//! turn reads (Claude's `Read`), and which `lineage workspace pull` and `diff` show.
//!
//! Without npm the adapters cannot be installed: each test says so in one line and passes.

#[path = "harness/fixture.rs"]
mod fixture;

use fixture::*;
use lineage_testkit::prelude::id_of;
use serde_json::{json, Value};

/// The child's edit in harness `h`'s own tool, and the root's read of the result (Claude's
/// `Read`; Codex runs commands in read-only mode through its own `codex-linux-sandbox`
/// helper, which lineage's sandbox does not show it, so its root's files are read with
/// `lineage workspace pull` instead).
fn edit_and_read(h: &str) -> (Value, Option<Value>) {
    let text = format!("fixed by the {h} child");
    match h {
        "claude" => (
            json!({"tool": "Write", "args": {"file_path": "{cwd}/FIX.md", "content": format!("{text}\n")}}),
            Some(json!({"tool": "Read", "args": {"file_path": "{cwd}/FIX.md"}})),
        ),
        _ => (
            json!({"tool": "apply_patch", "args": {"input": format!("*** Begin Patch\n*** Add File: FIX.md\n+{text}\n*** End Patch\n")}}),
            None,
        ),
    }
}

fn child_edits_and_parent_applies(h: &str) {
    let Some(bins) = harness_bins() else { return };
    let (edit, read) = edit_and_read(h);
    let fx = fixture(
        &bins,
        json!([
            {"when": {"last_user_contains": "root-W", "last_is": "user"},
             "reply": {"tool": "spawn_subagent", "args": {"profile": format!("{h}-edit"),
                 "prompt": "child-W: write the fix", "shape": "one-shot", "node": "node-2"}}},
            {"when": {"last_user_contains": "child-W", "last_is": "user"}, "reply": edit},
            {"when": {"last_user_contains": "child-W", "last_is": "tool_result"},
             "reply": {"text": "child-W wrote FIX.md: {tool_result}"}},
            // The one-shot result says the child's files changed (issue 39: the reference
            // to its changes); only then does the root apply them.
            {"when": {"last_user_contains": "root-W", "tool_result_contains": "changed against the files it started from"},
             "reply": {"tool": "apply_child_changes", "args": {"child": "{tool_result:child}"}}},
            {"when": {"last_user_contains": "root-W", "tool_result_contains": "FIX.md"},
             "reply": {"text": "root applied: {tool_result}"}},
            {"when": {"last_user_contains": "read-W", "last_is": "user"}, "reply": read.clone().unwrap_or(json!({"text": "-"}))},
            {"when": {"last_user_contains": "read-W", "last_is": "tool_result"},
             "reply": {"text": "root read: {tool_result}"}}
        ]),
    );
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("README.md"), "the parent's project\n").unwrap();
    let reply = fx.cluster.spawn(&[
        "--node",
        "node-1",
        "--profile",
        h,
        "--workspace",
        files.path().to_str().unwrap(),
        "--prompt",
        "root-W: delegate the fix",
    ]);
    let root = id_of(&reply["session"]);
    let applied = lineage_testkit::poll(std::time::Duration::from_secs(240), || {
        fixture::replies(&fx.cluster.log(&root))
            .iter()
            .any(|r| r.contains("root applied"))
            .then_some(())
    });
    if applied.is_err() {
        // What the child's own log says (a failed turn's error), then the usual diagnosis.
        let tree = fx.cluster.tree(&root);
        let children: Vec<String> = tree
            .iter()
            .filter(|r| r["session"] != root.as_str())
            .map(|r| {
                let id = r["session"].as_str().unwrap_or_default();
                let ends: Vec<String> = fx
                    .cluster
                    .log(id)
                    .iter()
                    .filter(|e| e.kind == "turn/end" || e.kind == "turn/assistant")
                    .map(|e| e.data.to_string())
                    .collect();
                format!("{id}: {}", ends.join(" | "))
            })
            .collect();
        panic!(
            "{h}: no applied change; children: {children:#?}\n{}",
            fx.diagnose()
        );
    }
    let replies = fx.wait_reply(
        &root,
        "the applied change in the root's reply",
        "root applied",
    );
    let applied = replies.iter().find(|r| r.contains("root applied")).unwrap();
    assert!(
        applied.contains("FIX.md") && applied.contains("added"),
        "{h}: {applied}\n{}",
        fx.diagnose()
    );
    let tree = fx.cluster.tree(&root);
    let child = tree
        .iter()
        .find(|r| r["session"] != root.as_str())
        .unwrap_or_else(|| panic!("{tree:?}"));
    assert_eq!(child["node"], "node-2", "{child}");

    // The root's next turn reads the file with its harness's own tool; its files as stored.
    let text = format!("fixed by the {h} child");
    if read.is_some() {
        fx.cluster
            .cli_json(&["send", &root, "read-W: show me the fix"]);
        let replies = fx.wait_reply(&root, "the root reading the child's file", "root read");
        let read = replies.iter().find(|r| r.contains("root read")).unwrap();
        assert!(read.contains(&text), "{h}: {read}\n{}", fx.diagnose());
    }
    let pulled = tempfile::tempdir().unwrap();
    let into = pulled.path().join("root");
    let (code, _, err) =
        fx.cluster
            .cli(&["workspace", "pull", &root, "--into", into.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(into.join("FIX.md")).unwrap_or_default(),
        format!("{text}\n"),
        "{h}: the root's files hold the child's file"
    );

    // And the root's own changes, as a diff against the client's files.
    let (code, diff, err) = fx.cluster.cli(&["workspace", "diff", &root]);
    assert_eq!(code, 0, "{err}");
    assert!(diff.contains(&format!("+{text}")), "{h}: {diff}");
}

#[test]
fn c1_t1_a_claude_child_on_another_node_edits_its_parents_files_and_the_parent_applies_them() {
    child_edits_and_parent_applies("claude");
}

#[test]
fn c1_t1_a_codex_child_on_another_node_edits_its_parents_files_and_the_parent_applies_them() {
    child_edits_and_parent_applies("codex");
}
