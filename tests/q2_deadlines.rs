//! Q2 on a real cluster: a spawn's `timeout_ms` becomes an absolute deadline frozen in the
//! child's header as `min(parent's, requested)`; at the deadline the sweeper drains the subtree,
//! children first, with stop reason `deadline`, and the drained root's parent gets the notice.
//! A child that asks for more time than its parent has gets the parent's deadline, and goes
//! down with it. A timeout out of range is refused in one line and registers nothing.

use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(60);

fn sleeper() -> Value {
    json!({"turns": [[{"do": "sleep", "ms": 300000}]]})
}

fn spawn_with_timeout(node: &str, label: &str, timeout_ms: u64, script: Value) -> Value {
    let mut step = spawn_step("continuable", node, label, script);
    step["label"] = json!(label);
    step["timeout_ms"] = json!(timeout_ms);
    step
}

fn row<'a>(tree: &'a [Value], label_or_id: &str) -> &'a Value {
    tree.iter()
        .find(|r| r["session"] == label_or_id)
        .unwrap_or_else(|| panic!("{label_or_id} not in {tree:?}"))
}

fn deadline(r: &Value) -> u64 {
    r["deadline_at_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("no deadline: {r}"))
}

/// Waits until `session` under `root` is disposed.
fn wait_disposed(c: &Cluster, root: &str, session: &str) {
    c.wait_state(root, session, "disposed", T);
}

#[test]
fn q2_a_subtree_past_its_deadline_is_drained_children_first_and_its_parent_told() {
    let c = Cluster::start(3);
    // The root has 10 minutes; child `long` asks for 20 (gets the root's), child `short` for
    // 3 s, and `short` spawns a grandchild that asks for nothing (inherits the 3 s).
    let short = json!({"turns": [[
        spawn_step("continuable", "node-1", "grandchild", sleeper()),
        {"do": "sleep", "ms": 300000}
    ]]});
    let root_script = json!({
        "turns": [[
            spawn_with_timeout("node-2", "long", 1_200_000, sleeper()),
            spawn_with_timeout("node-3", "short", 3_000, short),
            {"do": "reply", "text": "spawned"}
        ]],
        "after": {"do": "echo"}
    });
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--deadline-ms",
        "600000",
        "--prompt",
        "go",
        "--script",
        &root_script.to_string(),
    ]);
    let root = id_of(&reply["session"]);
    let tree = wait_for(T, "4 sessions", || {
        let tree = c.tree(&root);
        (tree.len() == 4).then_some(tree)
    });
    let root_row = row(&tree, &root);
    let kids = Cluster::children(&tree, &root);
    assert_eq!(kids.len(), 2, "{tree:?}");
    let (long, short) = (kids[0].clone(), kids[1].clone());
    let grandchild = Cluster::children(&tree, &short)[0].clone();
    let created = root_row["created_at_ms"].as_u64().unwrap();
    let d_root = deadline(root_row);
    assert!(
        (created + 590_000..=created + 610_000).contains(&d_root),
        "root deadline {d_root}, born {created}"
    );
    assert_eq!(
        deadline(row(&tree, &long)),
        d_root,
        "a child asking for 20 min gets its parent's 10"
    );
    let d_short = deadline(row(&tree, &short));
    assert!(d_short < d_root, "{d_short} vs {d_root}");
    assert_eq!(deadline(row(&tree, &grandchild)), d_short, "inherited");
    // Each row carries its session's label (null when the spawn gave none).
    assert_eq!(row(&tree, &long)["label"], "long", "{tree:?}");
    assert_eq!(row(&tree, &short)["label"], "short", "{tree:?}");
    assert_eq!(row(&tree, &grandchild)["label"], Value::Null, "{tree:?}");
    // The human tree says how long each has left, and each session's label (or `-`).
    let (code, text, err) = c.cli(&["tree", &root]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("deadline=in "), "{text}");
    let line_of = |session: &str| {
        text.lines()
            .find(|l| l.contains(session))
            .unwrap_or_else(|| panic!("{session} not in {text}"))
    };
    assert!(line_of(&long).contains("  label=long  "), "{text}");
    assert!(line_of(&short).contains("  label=short  "), "{text}");
    assert!(line_of(&grandchild).contains("  label=-  "), "{text}");

    // At the deadline: the grandchild, then `short`, disposed; `long` and the root run on.
    wait_disposed(&c, &root, &short);
    let after = c.tree(&root);
    let (g, s) = (row(&after, &grandchild), row(&after, &short));
    assert_eq!(g["state"], "disposed", "{after:?}");
    assert!(
        g["updated_at_ms"].as_u64() <= s["updated_at_ms"].as_u64(),
        "children first: {after:?}"
    );
    assert!(
        s["updated_at_ms"].as_u64().unwrap() >= d_short,
        "drained before its deadline: {after:?}"
    );
    assert_eq!(row(&after, &long)["state"], "running", "{after:?}");
    assert_ne!(row(&after, &root)["state"], "disposed", "{after:?}");
    for (session, what) in [(&short, "short"), (&grandchild, "grandchild")] {
        let log = c.log(session);
        let ends = of_kind(&log, "turn/end");
        assert_eq!(ends.len(), 1, "{what}: {}", render_log(&log));
        assert_eq!(
            ends[0].data["stop_reason"],
            "deadline",
            "{what}: {}",
            render_log(&log)
        );
        let settled = of_kind(&log, "outbox/settled");
        assert_eq!(settled.len(), 1, "{what}: {}", render_log(&log));
        assert_eq!(settled[0].data["stop_reason"], "deadline", "{what}");
    }
    // The root (not past its deadline) got `short`'s notice, once.
    let log = c.wait_log(&root, T, "short's deadline notice", |log| {
        log.iter()
            .any(|e| e.kind == "inbox/accepted" && e.data.to_string().contains(short.as_str()))
    });
    let notices: Vec<_> = log
        .iter()
        .filter(|e| e.kind == "inbox/accepted" && e.data.to_string().contains(short.as_str()))
        .collect();
    assert_eq!(notices.len(), 1, "{}", render_log(&log));
    assert!(
        notices[0]
            .data
            .to_string()
            .contains("ran past its deadline"),
        "{}",
        render_log(&log)
    );
}

#[test]
fn q2_a_child_never_outlives_its_parents_deadline_and_bad_timeouts_are_refused() {
    let c = Cluster::start(3);
    let root_script = json!({"turns": [[
        spawn_with_timeout("node-2", "greedy", 1_200_000, sleeper()),
        {"do": "sleep", "ms": 300000}
    ]]});
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--deadline-ms",
        "4000",
        "--prompt",
        "go",
        "--script",
        &root_script.to_string(),
    ]);
    let root = id_of(&reply["session"]);
    let tree = wait_for(T, "the child", || {
        let tree = c.tree(&root);
        (tree.len() == 2).then_some(tree)
    });
    let child = Cluster::children(&tree, &root)[0].clone();
    assert_eq!(deadline(row(&tree, &child)), deadline(row(&tree, &root)));
    wait_disposed(&c, &root, &root);
    let after = c.tree(&root);
    assert_eq!(row(&after, &child)["state"], "disposed", "{after:?}");
    assert!(
        row(&after, &child)["updated_at_ms"].as_u64()
            <= row(&after, &root)["updated_at_ms"].as_u64(),
        "children first: {after:?}"
    );
    let log = c.log(&child);
    assert_eq!(
        of_kind(&log, "turn/end")[0].data["stop_reason"],
        "deadline",
        "{}",
        render_log(&log)
    );

    // Out of range: one line, nothing registered.
    let before = c.cli_json(&["status"]);
    for bad in ["0", "2592000001"] {
        let (code, out, err) = c.cli(&["spawn", "--node", "node-2", "--deadline-ms", bad]);
        assert_eq!(code, 2, "{bad}: stdout {out} stderr {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("--deadline-ms {bad} is out of range")),
            "{err}"
        );
        // The control service itself (a client that is not our CLI) refuses it too.
        let body = json!({"agent": {"driver": "script", "script": {"turns": []}},
            "node": "node-2", "timeout_ms": bad.parse::<u64>().unwrap()});
        let reply = c.ctl("spawn", body.to_string().as_bytes());
        let text = reply.to_string();
        assert!(
            text.contains(&format!("timeout_ms {bad} is out of range")),
            "{text}"
        );
    }
    let after = c.cli_json(&["status"]);
    assert_eq!(
        before["sessions"], after["sessions"],
        "a refused spawn registered something: {before} vs {after}"
    );
}
