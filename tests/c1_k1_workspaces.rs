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
//! - A child spawned by the root's agent with the spawn tool, on another node, starts in a
//!   copy of its parent's files (C1); its edits come back as its changes; an `empty` child sees
//!   none of them.
//! - A stored snapshot that is not the one its log names is refused at the resume, never
//!   materialized; bad `--workspace` values get one line and exit code 2.

use std::path::Path;
use std::time::Duration;

use lineage_testkit::binary::delegator_profiles;
use lineage_testkit::prelude::{id_of, wait_for, Cluster, Event};

const T: Duration = Duration::from_secs(60);

fn replies(log: &[Event]) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "turn/assistant")
        .map(|e| e.data["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The reply of the session's turn number `n` (1 first), once it is there.
fn reply_n(c: &Cluster, session: &str, n: usize) -> String {
    let log = c.wait_log(session, T, &format!("reply {n}"), |log| {
        replies(log).len() >= n
    });
    replies(&log)[n - 1].clone()
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The client's project: two files, and a build output `.gitignore` leaves out.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.txt", "hello from the client\n");
    write(dir.path(), "src/lib.rs", "fn main() {}\n");
    write(dir.path(), ".gitignore", "target/\n");
    write(dir.path(), "target/huge.bin", "ignored build output\n");
    dir
}

fn snapshots(c: &Cluster, session: &str) -> Vec<Event> {
    c.log(session)
        .into_iter()
        .filter(|e| e.kind == "workspace/snapshot")
        .collect()
}

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

#[test]
fn c1_bad_workspace_values_get_one_line_and_change_nothing() {
    let c = Cluster::start_with_toml(1, &[], &delegator_profiles());
    let (code, _, err) = c.cli(&[
        "spawn",
        "--profile",
        "delegator",
        "--workspace",
        "/nonexistent/project",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("/nonexistent/project") && err.trim().lines().count() == 1,
        "{err}"
    );
    let (code, _, err) = c.cli(&[
        "spawn",
        "--parent",
        "01936c1e-7a3b-7cde-8f00-000000000001",
        "--profile",
        "delegator",
        "--workspace",
        "everything",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("inherit") && err.trim().lines().count() == 1,
        "{err}"
    );
    let (code, _, err) = c.cli(&["workspace", "diff", "01936c1e-7a3b-7cde-8f00-000000000001"]);
    assert_eq!(code, 3, "{err}");
    // Nothing was born.
    let listed = c.cli_json(&["ls"]);
    assert_eq!(
        listed["sessions"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
    // A retried root spawn (same request id) answers the first session and leaves no files
    // under the id its second try minted; the client's upload is gone too.
    let files = project();
    let retried: Vec<String> = (0..2)
        .map(|_| {
            let reply = c.spawn(&[
                "--request-id",
                "01936c1e-7a3b-7cde-8f00-0000000000aa",
                "--profile",
                "delegator",
                "--workspace",
                files.path().to_str().unwrap(),
            ]);
            id_of(&reply["session"])
        })
        .collect();
    assert_eq!(retried[0], retried[1]);
    assert_eq!(
        bucket_objects(&c),
        vec![format!("{}.base", retried[0])],
        "one session's base, nothing else"
    );
}

#[test]
fn k1_a_checkpoint_replaced_behind_the_logs_back_is_refused_at_the_resume_never_materialized() {
    let mut c = Cluster::start_with_toml(3, &[], &delegator_profiles());
    let files = project();
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator",
        "--workspace",
        files.path().to_str().unwrap(),
        "--prompt",
        "sh: echo one > a.txt",
    ]);
    let root = id_of(&reply["session"]);
    reply_n(&c, &root, 1);
    let checkpoint = wait_for(T, "the first turn's checkpoint", || {
        snapshots(&c, &root).get(1).cloned()
    });
    let object = checkpoint.data["object"].as_str().unwrap().to_owned();
    // Someone with write access to the bucket replaces the object: other bytes, a valid archive.
    let other = project();
    write(other.path(), "a.txt", "planted\n");
    let planted = lineage_workspace_bytes(other.path());
    let url = c.nats.url();
    let subjects = lineage_bus::Subjects::new(&c.cluster).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use lineage_bus::ports::WorkspaceStore;
        let nats = async_nats::connect(url).await.unwrap();
        let store =
            lineage_bus::workspace::NatsWorkspaces::new(nats, &subjects, Default::default());
        store.put(&object, &planted).await.unwrap();
    });

    c.nodes[0].kill();
    c.wait_lease("node-1", false, T);
    let (code, out, err) = c.cli(&["send", &root, "sh: cat a.txt"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("damaged") && err.trim().lines().count() == 1,
        "{err}"
    );
    // No turn ran on the planted files.
    let log = c.log(&root);
    assert!(
        !replies(&log).iter().any(|r| r.contains("planted")),
        "{log:?}"
    );
    assert_eq!(replies(&log).len(), 1, "{log:?}");
}

/// The names of the objects in the cluster's workspace bucket.
fn bucket_objects(c: &Cluster) -> Vec<String> {
    let subjects = lineage_bus::Subjects::new(&c.cluster).unwrap();
    let url = c.nats.url();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use futures::StreamExt;
        let nats = async_nats::connect(url).await.unwrap();
        let js = async_nats::jetstream::new(nats);
        let store = js
            .get_object_store(subjects.workspace_bucket())
            .await
            .unwrap();
        let mut names: Vec<String> = store
            .list()
            .await
            .unwrap()
            .map(|info| info.unwrap().name)
            .collect()
            .await;
        names.sort();
        names
    })
}

/// `dir` packed as `lineage spawn --workspace` packs it.
fn lineage_workspace_bytes(dir: &Path) -> Vec<u8> {
    lineage_workspace::pack(dir, lineage_workspace::Caps::default())
        .unwrap()
        .bytes
}

#[test]
fn z2_workspaces_work_under_the_shipped_nats_permissions() {
    let mut c = Cluster::start_secured_with_toml(3, &delegator_profiles());
    let files = project();
    // The operator uploads; the voters copy, materialize and checkpoint.
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator",
        "--workspace",
        files.path().to_str().unwrap(),
        "--prompt",
        "sh: cat a.txt; echo secured > a.txt",
    ]);
    let root = id_of(&reply["session"]);
    let first = reply_n(&c, &root, 1);
    assert!(first.contains("hello from the client"), "{first}");
    wait_for(T, "the first turn's checkpoint", || {
        (snapshots(&c, &root).len() == 2).then_some(())
    });
    c.nodes[0].kill();
    c.wait_lease("node-1", false, T);
    let sent = c.cli_json(&["send", &root, "sh: cat a.txt"]);
    assert_ne!(sent["node"], "node-1", "{sent}");
    let second = reply_n(&c, &root, 2);
    assert!(second.contains("secured"), "{second}");
    // The operator reads the changes; the observer cannot.
    let (code, diff, err) = c.cli(&["workspace", "diff", &root]);
    assert_eq!(code, 0, "{err}");
    assert!(diff.contains("+secured"), "{diff}");
    let violations: Vec<String> = c
        .permission_violations()
        .into_iter()
        .filter(|l| l.contains("OBJ_") || l.contains("$O."))
        .collect();
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn c1_a_workspace_over_its_profiles_cap_is_refused_with_the_numbers_and_nothing_runs() {
    let agent = lineage_testkit::binary::lineage_bin().with_file_name("lineage-acp-testagent");
    let small = format!(
        "{}\n[agents.small]\ndriver = \"acp\"\ncommand = \"{agent}\"\nworkspace_max_bytes = 64\n\n[agents.closed]\ndriver = \"acp\"\ncommand = \"{agent}\"\nworkspace_uploads = false\n",
        delegator_profiles(),
        agent = agent.display()
    );
    let c = Cluster::start_with_toml(1, &[], &small);
    let files = project();
    write(files.path(), "big.txt", &"x".repeat(1000));
    let (code, _, err) = c.cli(&[
        "spawn",
        "--profile",
        "small",
        "--workspace",
        files.path().to_str().unwrap(),
        "--prompt",
        "sh: ls",
    ]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("at most 64 allowed") && err.trim().lines().count() == 1,
        "{err}"
    );
    // The birth was disposed: nothing runs, nothing waits.
    for state in ["running", "waiting", "starting"] {
        let listed = c.cli_json(&["ls", "--state", state]);
        assert_eq!(
            listed["sessions"].as_array().map(Vec::len),
            Some(0),
            "{state}: {listed}"
        );
    }
    // A profile that takes no client's files, and a scripted agent (no directory of its
    // own): refused in one line before anything is written.
    let before = c.cli_json(&["ls"]);
    for (profile, expected) in [
        ("closed", "workspace_uploads = false"),
        ("echo", "no directory of its own"),
    ] {
        let (code, _, err) = c.cli(&[
            "spawn",
            "--profile",
            profile,
            "--workspace",
            files.path().to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{profile}: {err}");
        assert!(
            err.contains(expected) && err.trim().lines().count() == 1,
            "{profile}: {err}"
        );
    }
    assert_eq!(c.cli_json(&["ls"]), before, "nothing was born");
    // The same files under the default cap run.
    let reply = c.spawn(&[
        "--profile",
        "delegator",
        "--workspace",
        files.path().to_str().unwrap(),
        "--prompt",
        "sh: wc -c big.txt",
    ]);
    let root = id_of(&reply["session"]);
    assert!(reply_n(&c, &root, 1).contains("1000 big.txt"));

    // A session under its cap whose turn writes past it: the turn's end stores no checkpoint
    // and says why (the turn fails, with the numbers); the log keeps naming its base.
    let tiny = tempfile::tempdir().unwrap();
    write(tiny.path(), "a.txt", "small\n");
    let reply = c.spawn(&[
        "--profile",
        "small",
        "--workspace",
        tiny.path().to_str().unwrap(),
        "--prompt",
        "sh: head -c 1000 /dev/zero > big.bin; echo wrote",
    ]);
    let over = id_of(&reply["session"]);
    let end = wait_for(T, "the over-cap turn's end", || {
        c.log(&over).into_iter().find(|e| e.kind == "turn/end")
    });
    assert_eq!(end.data["stop_reason"], "failed", "{end:?}");
    let error = end.data["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("not checkpointed") && error.contains("at most 64 allowed"),
        "{end:?}"
    );
    assert_eq!(snapshots(&c, &over).len(), 1, "only its base");
}
