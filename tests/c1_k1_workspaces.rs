//! Issue 39, end to end: workspaces that travel with the session, on real `lineage` nodes and a
//! real nats-server (JetStream's Object Store), with the ACP test agent running shell commands
//! in its sandbox as a coding agent does (`sh:` lines).
//!
//! - A root spawned with `--workspace DIR` starts in the client's files (what `.gitignore`
//!   leaves out is not there); its turns change them; its node is killed; the followup resumes
//!   it on another node, whose agent sees the changed files (K1). `lineage workspace diff`
//!   shows the changes, `apply` writes them to a checkout (a second apply changes nothing, a
//!   checkout changed on the same path is refused with the path and left as it was), `pull`
//!   writes the latest files.
//! - A continuable child whose node is killed after a turn changed its files resumes elsewhere
//!   in them (K1).
//! - A child spawned by the root's agent with the spawn tool, on another node, starts in a
//!   copy of its parent's files (C1); its edits come back as its changes (its result and its
//!   settlement say how many paths); an `empty` child sees none of them.
//!
//! Refusals (bad values, caps, damaged objects, permissions) are in
//! `c1_k1_workspace_refusals.rs`.

mod workspace;

use lineage_testkit::binary::delegator_profiles;
use lineage_testkit::prelude::{id_of, wait_for, Cluster};
use workspace::{project, replies, reply_n, snapshots, write, T};

#[test]
fn c1_k1_a_root_starts_in_its_upload_and_a_resume_on_another_node_sees_its_changed_files() {
    let mut c = Cluster::start_with_toml(3, &[], &delegator_profiles());
    let files = project();
    let dir = files.path().to_str().unwrap();
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator",
        "--workspace",
        dir,
        "--prompt",
        "sh: cat a.txt src/lib.rs; ls -a",
    ]);
    let root = id_of(&reply["session"]);
    let first = reply_n(&c, &root, 1);
    assert!(first.contains("hello from the client"), "{first}");
    assert!(first.contains("fn main() {}"), "{first}");
    assert!(!first.contains("target"), "ignored files stay out: {first}");
    // The client's upload was copied to the session's base and removed. The first turn
    // changed no file: its end stored and logged no checkpoint.
    wait_for(T, "the first turn's end", || {
        c.log(&root)
            .iter()
            .any(|e| e.kind == "turn/end")
            .then_some(())
    });
    let logged = snapshots(&c, &root);
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(
        logged[0].data["object"],
        format!("{root}.base"),
        "{logged:?}"
    );

    let sent = c.cli_json(&[
        "send",
        &root,
        "sh: echo changed by turn 2 > a.txt; echo new file > b.txt; rm src/lib.rs",
    ]);
    assert_eq!(sent["node"], "node-1", "{sent}");
    let second = reply_n(&c, &root, 2);
    assert!(second.contains("sh exit 0"), "{second}");
    // The base, and the second turn's checkpoint: a delta of the three paths it changed.
    let delta = wait_for(T, "the second turn's checkpoint", || {
        snapshots(&c, &root).get(1).cloned()
    });
    assert_eq!(delta.data["changed"], 3, "{delta:?}");

    // Node-1 dies; the followup resumes the root elsewhere, in the files of its last turn.
    c.nodes[0].kill();
    c.wait_lease("node-1", false, T);
    let sent = c.cli_json(&["send", &root, "sh: cat a.txt b.txt; ls src"]);
    assert_eq!(sent["outcome"], "resumed_and_delivered", "{sent}");
    assert_ne!(sent["node"], "node-1", "{sent}");
    let third = reply_n(&c, &root, 3);
    assert!(third.contains("changed by turn 2"), "{third}");
    assert!(third.contains("new file"), "{third}");
    assert!(
        !third.contains("lib.rs"),
        "the deleted file stays deleted: {third}"
    );

    // The changes against the upload, as a diff.
    let (code, diff, err) = c.cli(&["workspace", "diff", &root]);
    assert_eq!(code, 0, "{err}");
    assert!(
        diff.contains("-hello from the client\n+changed by turn 2\n"),
        "{diff}"
    );
    assert!(diff.contains("+++ b/b.txt"), "{diff}");
    assert!(diff.contains("--- a/src/lib.rs"), "{diff}");

    // Applied to a checkout of the original: every change; again: nothing.
    let checkout = project();
    let applied = c.cli_json(&[
        "workspace",
        "apply",
        &root,
        "--into",
        checkout.path().to_str().unwrap(),
    ]);
    assert_eq!(
        applied["changed"].as_array().map(Vec::len),
        Some(3),
        "{applied}"
    );
    assert_eq!(
        std::fs::read_to_string(checkout.path().join("a.txt")).unwrap(),
        "changed by turn 2\n"
    );
    assert!(checkout.path().join("b.txt").exists());
    assert!(!checkout.path().join("src/lib.rs").exists());
    let again = c.cli_json(&[
        "workspace",
        "apply",
        &root,
        "--into",
        checkout.path().to_str().unwrap(),
    ]);
    assert_eq!(
        (
            again["changed"].as_array().map(Vec::len),
            again["already"].as_u64()
        ),
        (Some(0), Some(3)),
        "{again}"
    );

    // A checkout changed on the same path: refused, with the path, and nothing written.
    let mine = project();
    write(mine.path(), "a.txt", "my own edit\n");
    let (code, _, err) = c.cli(&[
        "workspace",
        "apply",
        &root,
        "--into",
        mine.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("a.txt") && err.trim().lines().count() == 1,
        "{err}"
    );
    assert!(
        !mine.path().join("b.txt").exists(),
        "nothing written: {err}"
    );
    assert!(
        mine.path().join("src/lib.rs").exists(),
        "nothing written: {err}"
    );

    // The latest files, pulled.
    let pulled = tempfile::tempdir().unwrap();
    let into = pulled.path().join("files");
    let (code, _, err) = c.cli(&["workspace", "pull", &root, "--into", into.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(into.join("b.txt")).unwrap(),
        "new file\n"
    );
}

#[test]
fn k1_a_child_whose_node_is_killed_after_a_turn_changed_its_files_resumes_elsewhere_in_them() {
    let mut c = Cluster::start_with_toml(3, &[], &delegator_profiles());
    let files = project();
    let root = id_of(
        &c.spawn(&[
            "--node",
            "node-1",
            "--profile",
            "delegator",
            "--workspace",
            files.path().to_str().unwrap(),
        ])["session"],
    );
    // A continuable child on node-2 in a copy of its parent's files; its turn changes them.
    let child = id_of(
        &c.spawn(&[
            "--parent",
            &root,
            "--shape",
            "continuable",
            "--node",
            "node-2",
            "--profile",
            "delegator",
            "--prompt",
            "sh: echo work of the child > work.txt; echo changed by the child > a.txt",
        ])["session"],
    );
    assert!(reply_n(&c, &child, 1).contains("sh exit 0"));
    let delta = wait_for(T, "the child's checkpoint", || {
        snapshots(&c, &child).get(1).cloned()
    });
    assert_eq!(delta.data["changed"], 2, "{delta:?}");

    // Node-2 dies; the child's next turn runs elsewhere, in the files its last turn left.
    c.nodes[1].kill();
    c.wait_lease("node-2", false, T);
    let sent = c.cli_json(&["send", &child, "sh: cat work.txt a.txt src/lib.rs"]);
    assert_eq!(sent["outcome"], "resumed_and_delivered", "{sent}");
    assert_ne!(sent["node"], "node-2", "{sent}");
    let second = reply_n(&c, &child, 2);
    assert!(
        second.contains("work of the child")
            && second.contains("changed by the child")
            && second.contains("fn main()"),
        "{second}"
    );
}

#[test]
fn c1_a_child_on_another_node_starts_in_its_parents_files_and_its_changes_come_back() {
    let c = Cluster::start_with_toml(3, &[], &delegator_profiles());
    let files = project();
    // The root's agent: a child on node-2 in a copy of its files, then its changes applied to
    // its own files (the spawn tool and apply_child_changes), then a child in an empty
    // directory.
    let spawn = r#"tool: spawn_subagent {"profile": "delegator", "shape": "one-shot", "node": "node-2", "prompt": "sh: cat a.txt; echo fixed by the child > a.txt; echo child notes > notes.txt"}"#;
    let apply = r#"tool: apply_child_changes {"child": "$child"}"#;
    let empty = r#"tool: spawn_subagent {"profile": "delegator", "shape": "one-shot", "node": "node-2", "workspace": "empty", "prompt": "sh: ls -A | wc -l"}"#;
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator",
        "--workspace",
        files.path().to_str().unwrap(),
        "--prompt",
        &format!("{spawn}\n{apply}\n{apply}\n{empty}"),
    ]);
    let root = id_of(&reply["session"]);
    let text = reply_n(&c, &root, 1);
    let body = |prefix: &str, line: &str| -> serde_json::Value {
        serde_json::from_str(
            line.strip_prefix(prefix)
                .unwrap_or_else(|| panic!("{prefix}: {line}\n{text}")),
        )
        .unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let spawned: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.starts_with("tool spawn_subagent"))
        .map(|l| body("tool spawn_subagent: ", l))
        .collect();
    let applied: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.starts_with("tool apply_child_changes"))
        .map(|l| body("tool apply_child_changes: ", l))
        .collect();
    assert_eq!((spawned.len(), applied.len()), (2, 2), "{text}");
    let (inheriting, empty) = (&spawned[0], &spawned[1]);
    // The child saw its parent's files on node-2, and its result says what it changed ...
    let output = inheriting["output"].as_str().unwrap_or_default();
    assert!(output.contains("hello from the client"), "{inheriting}");
    assert_eq!(inheriting["changed_paths"], 2, "{inheriting}");
    assert!(
        inheriting["changes"]
            .as_str()
            .is_some_and(|s| s.contains("apply_child_changes")),
        "{inheriting}"
    );
    assert_eq!(empty["changed_paths"], serde_json::Value::Null, "{empty}");
    // ... and the empty one saw none of them.
    assert!(
        !empty["output"]
            .as_str()
            .unwrap_or_default()
            .contains("a.txt"),
        "{empty}"
    );
    let child = inheriting["child"].as_str().unwrap().to_owned();
    let row = c.row(&root, &child);
    assert_eq!(row["node"], "node-2", "{row}");
    // The parent applied the child's two changes; the second call found them applied.
    assert_eq!(
        applied[0]["changed"],
        serde_json::json!([{"path": "a.txt", "change": "modified"}, {"path": "notes.txt", "change": "added"}]),
        "{text}"
    );
    assert_eq!(applied[1]["changed"], serde_json::json!([]), "{text}");
    assert_eq!(applied[1]["already"], 2, "{text}");

    // The parent's next turn sees the child's work in its own files.
    c.cli_json(&["send", &root, "sh: cat a.txt notes.txt"]);
    let second = reply_n(&c, &root, 2);
    assert!(
        second.contains("fixed by the child") && second.contains("child notes"),
        "{second}"
    );

    // The child's changes as its diff, and applied by the parent's user to a checkout.
    let (code, diff, err) = c.cli(&["workspace", "diff", &child]);
    assert_eq!(code, 0, "{err}");
    assert!(
        diff.contains("-hello from the client\n+fixed by the child\n"),
        "{diff}"
    );
    assert!(diff.contains("+++ b/notes.txt"), "{diff}");
    let checkout = project();
    let applied = c.cli_json(&[
        "workspace",
        "apply",
        &child,
        "--into",
        checkout.path().to_str().unwrap(),
    ]);
    assert_eq!(
        applied["changed"].as_array().map(Vec::len),
        Some(2),
        "{applied}"
    );
    assert_eq!(
        std::fs::read_to_string(checkout.path().join("a.txt")).unwrap(),
        "fixed by the child\n"
    );

    // A parent whose own file changed since is refused with the path, and nothing is written.
    c.cli_json(&[
        "send",
        &root,
        "sh: echo edited by the parent > a.txt; rm notes.txt",
    ]);
    reply_n(&c, &root, 3);
    let again = format!(r#"tool: apply_child_changes {{"child": "{child}"}}"#);
    c.cli_json(&["send", &root, &again]);
    let fourth = reply_n(&c, &root, 4);
    assert!(
        fourth.contains("tool apply_child_changes error"),
        "{fourth}"
    );
    assert!(fourth.contains("a.txt"), "{fourth}");
    c.cli_json(&["send", &root, "sh: cat a.txt; ls"]);
    let fifth = reply_n(&c, &root, 5);
    assert!(fifth.contains("edited by the parent"), "{fifth}");
    assert!(!fifth.contains("notes.txt"), "nothing written: {fifth}");

    // A continuable child's settlement notice carries the reference to its changes: the
    // parent's inbox accepts it with the number of paths, which its prompt shows. This one
    // runs on its parent's node, which materializes the base it has just packed (no get).
    let continuable = r#"tool: spawn_subagent {"profile": "delegator", "shape": "continuable", "node": "node-1", "prompt": "sh: cat a.txt; echo from the continuable child > c.txt"}"#;
    c.cli_json(&["send", &root, continuable]);
    reply_n(&c, &root, 6);
    let settled = wait_for(T, "the continuable child's settlement", || {
        c.log(&root)
            .into_iter()
            .find(|e| e.kind == "inbox/accepted" && e.data["message"]["kind"] == "subagent-settled")
    });
    assert_eq!(settled.data["message"]["changed"], 1, "{settled:?}");
    let kid = settled.data["message"]["sender_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(c.row(&root, &kid)["node"], "node-1");
    let saw = replies(&c.log(&kid)).join("\n");
    assert!(
        saw.contains("edited by the parent"),
        "its parent's files: {saw}"
    );
}
