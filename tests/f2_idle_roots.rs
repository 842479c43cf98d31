//! Roots that end, and why things ended (issue 37, items 2, 5 and 9), through the CLI against a
//! real cluster: a root spawned with `--idle-ttl` is drained once it and its tree are idle that
//! long (stop reason `idle`), never while a child still works; a root without one stays; `tree`
//! and `show` say why each session ended (`idle`, `completed`, `deadline`, `disposed`); bad
//! `--idle-ttl` values are one line, exit 2; `/metrics` counts refusals by reason and times
//! spawns, registry writes and settlements.

use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::{json, Value};

/// The row of `session` in `lineage --json tree`.
fn row<'a>(tree: &'a [Value], session: &str) -> Option<&'a Value> {
    tree.iter().find(|r| r["session"] == session)
}

/// The value of the sample `line` starts (`name{labels} `) on a `/metrics` page.
fn sample(page: &str, line: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn f2_an_idle_root_is_drained_after_its_ttl_but_never_while_a_child_works() {
    let c = Cluster::start(1);
    // The root's first turn spawns a child that works for 4 s and does not wait for it: the
    // root is idle (no turn) while its child runs, longer than its 1 s TTL.
    let root = {
        let script = json!({"turns": [[
            spawn_step("continuable", "node-1", "work", json!({"turns": [[
                {"do": "sleep", "ms": 4000}, {"do": "reply", "content": "worked"}]]})),
            {"do": "reply", "content": "started a child"}
        ]], "after": {"do": "echo"}})
        .to_string();
        let (code, out, err) = c.cli(&[
            "spawn",
            "--prompt",
            "go",
            "--script",
            &script,
            "--idle-ttl",
            "1s",
        ]);
        assert_eq!(code, 0, "{err}\n{}", c.logs());
        out.split_whitespace()
            .nth(1)
            .expect("spawned <id>")
            .to_owned()
    };
    // A root without a TTL on a node without limits.idle_root_ms stays.
    let kept = c.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "content": "hi"}]]}),
    );

    let tree = wait_for(Duration::from_secs(30), "the idle root drained", || {
        let tree = c.tree(&root);
        (row(&tree, &root)?["state"] == "disposed").then_some(tree)
    });
    assert_eq!(
        row(&tree, &root).unwrap()["stop_reason"],
        "idle",
        "{tree:?}"
    );
    let child = Cluster::children(&tree, &root).pop().expect("the child");
    // The child settled on its own before the drain (a drain while it worked would have
    // disposed it with the drain's reason, `idle`).
    assert_eq!(
        row(&tree, &child).unwrap()["stop_reason"],
        "completed",
        "{tree:?}"
    );
    let (_, text, _) = c.cli(&["tree", &root]);
    assert!(
        text.lines()
            .any(|l| l.starts_with(&root) && l.contains("disposed") && l.contains("stop=idle")),
        "{text}"
    );
    let (_, show, _) = c.cli(&["show", &root]);
    assert!(show.contains("state     disposed (idle)"), "{show}");

    // The child's settlement was timed where it ran.
    let (_, page) = c.nodes[0].http_get("/metrics").expect("metrics");
    let settled = sample(
        &page,
        "lineage_settlement_duration_seconds_count{lineage_node=\"node-1\"} ",
    );
    assert!(settled.is_some_and(|n| n >= 1.0), "{page}");
    assert!(
        page.contains("lineage_settlements_total{lineage_node=\"node-1\",stop_reason=\"idle\"} 0"),
        "a root does not settle: {page}"
    );
    let kept_row = c.tree(&kept);
    assert_eq!(
        row(&kept_row, &kept).unwrap()["state"],
        "running",
        "{kept_row:?}"
    );
    assert!(row(&kept_row, &kept).unwrap()["stop_reason"].is_null());

    // A drain says `disposed`; a deadline says `deadline`.
    let (code, _, err) = c.cli(&["drain", &kept]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        row(&c.tree(&kept), &kept).unwrap()["stop_reason"],
        "disposed"
    );
    let (code, out, err) = c.cli(&[
        "spawn",
        "--prompt",
        "go",
        "--deadline-ms",
        "300",
        "--script",
        r#"{"turns":[[{"do":"reply","content":"hi"}]],"after":{"do":"echo"}}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let timed = out.split_whitespace().nth(1).unwrap().to_owned();
    wait_for(Duration::from_secs(20), "the deadline drain", || {
        let tree = c.tree(&timed);
        (row(&tree, &timed)?["stop_reason"] == "deadline").then_some(())
    });
}

#[test]
fn f2_bad_idle_ttls_are_one_line_and_metrics_count_refusals_and_time_writes() {
    let c = Cluster::start(1);
    for (args, want) in [
        (vec!["--idle-ttl", "0s"], "--idle-ttl 0 ms is out of range"),
        (
            vec!["--idle-ttl", "soon"],
            "--idle-ttl \"soon\" is not a duration",
        ),
        (
            vec!["--idle-ttl", "31days"],
            "is out of range; give 1 ms to 30 days",
        ),
    ] {
        let mut all = vec!["spawn", "--prompt", "go"];
        all.extend(args);
        let (code, out, err) = c.cli(&all);
        assert_eq!(code, 2, "{all:?}: {out}{err}");
        assert!(
            err.contains(want) && err.trim().lines().count() == 1,
            "{all:?}: {err}"
        );
    }
    // A root whose max depth is 0: its first turn's spawn is refused by the depth rule.
    let (code, out, err) = c.cli(&[
        "spawn",
        "--prompt",
        "go",
        "--max-depth",
        "0",
        "--script",
        &json!({"turns": [[spawn_step("continuable", "node-1", "x",
            json!({"turns": [[{"do": "reply", "content": "no"}]]})),
            {"do": "reply_result"}]], "after": {"do": "echo"}})
        .to_string(),
        "--wait",
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(out.contains("refused"), "{out}");
    let root = out.split_whitespace().nth(1).unwrap().to_owned();
    // An idle TTL on a child is refused: a child ends with its parent.
    let (code, _, err) = c.cli(&[
        "spawn",
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--idle-ttl",
        "5m",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a child ends with its parent"), "{err}");

    let (code, page) = c.nodes[0].http_get("/metrics").expect("metrics");
    assert_eq!(code, 200);
    let node = "{lineage_node=\"node-1\"";
    assert_eq!(
        sample(
            &page,
            &format!("lineage_refusals_total{node},reason=\"depth_exceeded\"}} ")
        ),
        Some(1.0),
        "{page}"
    );
    for family in [
        "lineage_spawn_duration_seconds_count",
        "lineage_registry_write_duration_seconds_count",
    ] {
        let n = sample(&page, &format!("{family}{node}}} "));
        assert!(n.is_some_and(|n| n >= 1.0), "{family}: {n:?}\n{page}");
    }
    assert!(sample(&page, &format!("lineage_agent_context_tokens{node}}} ")).is_some());
    let rss = sample(&page, &format!("process_resident_memory_bytes{node}}} "));
    assert!(rss.is_some_and(|b| b > 1e6), "{page}");
    // No series keeps the old `node` label.
    assert!(!page.contains("{node=\""), "{page}");
}
