//! Issue 39, end to end: what workspaces refuse, on real `lineage` nodes and a real
//! nats-server: bad `--workspace` values (one line, exit 2, nothing born), a retried root
//! spawn (no orphan files), a stored snapshot that is not the one its log names (refused at
//! the resume, never materialized), the shipped NATS permissions (no violation), a profile's
//! cap (refused with the numbers; a turn writing past it fails), a profile that takes no
//! client's files and an agent with no directory of its own (refused before anything is
//! written).

mod workspace;

use lineage_testkit::binary::delegator_profiles;
use lineage_testkit::prelude::{id_of, wait_for, Cluster};
use workspace::{
    bucket_objects, lineage_workspace_bytes, project, replies, reply_n, snapshots, write, T,
};

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
