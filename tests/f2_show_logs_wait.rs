//! Reading what an agent said, through the CLI against a real cluster (issue 37, item 1):
//! `lineage spawn --wait` prints the first turn's reply and exits by its outcome, `lineage show`
//! gives one session at a glance (in a turn or idle, its last reply and reports), `lineage logs`
//! prints its transcript from the event log and `logs -f` follows it until the session is
//! disposed. Bad ids are one line with the right exit code.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::{json, Value};

/// Drains `root` and waits for `follower` (a `logs -f` or a `watch` of it) to end by itself,
/// with success.
fn drain_and_see_it_end(c: &Cluster, root: &str, follower: &mut std::process::Child, what: &str) {
    let (code, _, err) = c.cli(&["drain", root]);
    assert_eq!(code, 0, "{err}");
    let status = wait_for(
        Duration::from_secs(20),
        format!("{what} to end once {root} is disposed"),
        || follower.try_wait().ok().flatten(),
    );
    assert!(status.success(), "{what}: {status:?}");
}

#[test]
fn f2_spawn_wait_show_and_logs_read_what_the_agents_said() {
    let c = Cluster::start(3);
    // A root that spawns a child on node-2 (which reports, then replies), waits for it, and
    // replies; then echoes every followup.
    let script = json!({"turns": [[
        spawn_step("continuable", "node-2", "look around", json!({"turns": [[
            {"do": "report", "content": "found three files", "delivery": "quiet"},
            {"do": "reply", "content": "child is done"}
        ]]})),
        {"do": "await_children", "timeout_ms": 20000},
        {"do": "reply", "content": "root says hi"}
    ]], "after": {"do": "echo"}})
    .to_string();
    let (code, out, err) = c.cli(&[
        "spawn", "--node", "node-1", "--prompt", "go", "--script", &script, "--wait",
    ]);
    assert_eq!(code, 0, "spawn --wait: {err}\n{out}\n{}", c.logs());
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("spawned "), "{out}");
    assert_eq!(lines[1..], ["turn 0 completed", "root says hi"], "{out}");
    let root = lines[0].split_whitespace().nth(1).unwrap().to_owned();
    let child = Cluster::children(&c.tree(&root), &root)
        .pop()
        .expect("the root's child");

    // A first turn that fails: exit 1, the reason in the JSON.
    let (code, out, err) = c.cli(&[
        "--json",
        "spawn",
        "--prompt",
        "go",
        "--script",
        r#"{"turns":[[{"do":"fail","reason":"the model went away"}]]}"#,
        "--wait",
    ]);
    assert_eq!(code, 1, "{err}\n{out}");
    let reply: Value = serde_json::from_str(out.trim()).expect("one JSON document");
    assert_eq!(reply["turn"]["stop_reason"], "failed", "{reply}");
    assert_eq!(reply["turn"]["error"], "the model went away", "{reply}");
    assert!(reply["spawn"]["session"].is_string(), "{reply}");

    // show: the root idle, its reply; the child's reports and settlement.
    let (code, out, err) = c.cli(&["show", &root]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "state     running, idle",
        "shape     root",
        "node      node-1@1",
        "turns     1 (last completed)",
        "reply     root says hi",
    ] {
        assert!(out.contains(want), "{want:?} in\n{out}");
    }
    let (code, out, _) = c.cli(&["show", &child]);
    assert_eq!(code, 0);
    for want in [
        "shape     continuable",
        "node      node-2@",
        &format!("parent    {root}"),
        "reply     child is done",
        "reports   - found three files",
        "settled   completed",
    ] {
        assert!(out.contains(want), "{want:?} in\n{out}");
    }
    let shown = c.cli_json(&["show", &child]);
    assert_eq!(shown["glance"]["reports"], json!(["found three files"]));
    assert_eq!(shown["record"]["header"]["id"], child.as_str(), "{shown}");

    // logs: the root's transcript, in order.
    let (code, out, err) = c.cli(&["logs", &root]);
    assert_eq!(code, 0, "{err}");
    let expected = [
        "── turn 0".to_owned(),
        "user: go".to_owned(),
        format!("spawned {child} (continuable) on node-2"),
        "assistant: root says hi".to_owned(),
        "── turn 0 completed".to_owned(),
    ];
    let mut at = 0;
    for line in out.lines() {
        if at < expected.len() && line.ends_with(expected[at].as_str()) {
            at += 1;
        }
    }
    assert_eq!(at, expected.len(), "{:?} in order in\n{out}", expected);
    let (code, out, _) = c.cli(&["--json", "logs", &root]);
    assert_eq!(code, 0);
    let kinds: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line")["kind"].to_string())
        .collect();
    assert!(kinds.contains(&"\"turn/end\"".to_owned()), "{kinds:?}");

    // logs -f follows: a followup's turn shows up; a drain ends it.
    let mut follow = Command::new(lineage_bin())
        .args(["--nats", &c.nats.url(), "--cluster", &c.cluster])
        .args(["logs", "-f", &root])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("logs -f");
    let (lines_tx, lines_rx) = mpsc::channel::<String>();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let (code, _, err) = c.cli(&["send", &root, "one more thing"]);
    assert_eq!(code, 0, "{err}");
    let mut seen = Vec::new();
    wait_for(
        Duration::from_secs(20),
        "logs -f shows the followup's turn",
        || {
            seen.extend(lines_rx.try_iter());
            seen.iter()
                .any(|l| l.ends_with("assistant: one more thing"))
                .then_some(())
        },
    );
    drain_and_see_it_end(&c, &root, &mut follow, "logs -f");

    // Bad ids: one line, the right exit code, the way out named.
    let unknown = "01936c1e-7a3b-7cde-8f00-00000000beef";
    for verb in ["show", "logs"] {
        let (code, out, err) = c.cli(&[verb, unknown]);
        assert_eq!(code, 3, "{verb}: {err}{out}");
        assert!(
            err.trim().lines().count() == 1
                && err.contains("not in the registry of cluster")
                && err.contains("lineage ls"),
            "{verb}: {err}"
        );
        let (code, _, err) = c.cli(&[verb, "not-an-id"]);
        assert_eq!(code, 2, "{verb}: {err}");
    }
}

/// The kinds of `watch`'s lines (its first column), in order.
fn watch_kinds(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn f2_watch_replays_then_follows_and_ends_with_its_parent() {
    let c = Cluster::start(3);
    let child = |name: &str, sleep_ms: u64| {
        spawn_step(
            "continuable",
            "node-2",
            name,
            json!({"turns": [[
                {"do": "sleep", "ms": sleep_ms},
                {"do": "report", "content": format!("{name} found it"), "delivery": "quiet"},
                {"do": "reply", "content": format!("{name} done")}
            ]]}),
        )
    };
    // Three children that are done before anyone watches.
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[child("a", 0), child("b", 0), child("c", 0),
            {"do": "await_children", "timeout_ms": 20000},
            {"do": "reply", "content": "all three"}]], "after": {"do": "echo"}}),
    );
    wait_for(
        Duration::from_secs(30),
        "the three children settled",
        || {
            let tree = c.tree(&root);
            (tree.iter().filter(|r| r["state"] == "settled").count() == 3).then_some(())
        },
    );
    // Started afterwards, watch replays all of it: three starts, three reports, three
    // settlements, and stops at --count.
    let (code, out, err) = c.cli(&["watch", &root, "--count", "9"]);
    assert_eq!(code, 0, "{err}");
    let mut kinds = watch_kinds(&out);
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "subagent-report",
            "subagent-report",
            "subagent-report",
            "subagent-settled",
            "subagent-settled",
            "subagent-settled",
            "subagent/start",
            "subagent/start",
            "subagent/start"
        ],
        "{out}"
    );
    // --since 0s replays nothing; the watch ends by itself once the parent is disposed.
    let mut quiet = Command::new(lineage_bin())
        .args(["--nats", &c.nats.url(), "--cluster", &c.cluster])
        .args(["watch", &root, "--since", "0s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("watch");
    std::thread::sleep(Duration::from_millis(1500));
    drain_and_see_it_end(&c, &root, &mut quiet, "watch");
    let mut rest = String::new();
    std::io::Read::read_to_string(quiet.stdout.as_mut().unwrap(), &mut rest).unwrap();
    assert!(!rest.contains("subagent/start"), "nothing replayed: {rest}");

    // Started while a child runs: its start (replayed or live) and what comes after (its end
    // is live only), each once.
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[child("slow", 2500)]], "after": {"do": "echo"}}),
    );
    let (code, out, err) = c.cli(&["watch", &root, "--count", "4"]);
    assert_eq!(code, 0, "{err}");
    let mut kinds = watch_kinds(&out);
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "subagent-report",
            "subagent-settled",
            "subagent/end",
            "subagent/start"
        ],
        "{out}"
    );

    // An unknown parent, or a cluster that does not answer: one line, at once.
    let (code, _, err) = c.cli(&["watch", "01936c1e-7a3b-7cde-8f00-00000000beef"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("not in the registry") && err.trim().lines().count() == 1,
        "{err}"
    );
    let other = Command::new(lineage_bin())
        .args(["--nats", &c.nats.url(), "--cluster", "prod", "watch", &root])
        .output()
        .expect("watch");
    let (code, err) = (
        other.status.code(),
        String::from_utf8_lossy(&other.stderr).into_owned(),
    );
    assert_eq!(code, Some(5), "{err}");
    assert!(
        err.contains("--cluster") && err.trim().lines().count() == 1,
        "{err}"
    );
}

#[test]
fn f2_activity_in_a_turn_or_idle_is_visible() {
    let c = Cluster::start(3);
    // A root whose child on node-2 sleeps in its turn for a while.
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[spawn_step("continuable", "node-2", "think",
            json!({"turns": [[{"do": "sleep", "ms": 8000}, {"do": "reply", "content": "ok"}]]}))]],
            "after": {"do": "echo"}}),
    );
    let child = wait_for(Duration::from_secs(20), "the child in its turn", || {
        let tree = c.cli_json(&["tree", &root]);
        let rows = tree.as_array().cloned().unwrap_or_default();
        let child = rows.iter().find(|r| r["session"] != root.as_str())?;
        let root_row = rows.iter().find(|r| r["session"] == root.as_str())?;
        (child["in_turn"] == true && root_row["in_turn"] == false)
            .then(|| child["session"].as_str().unwrap().to_owned())
    });
    // The text forms say it too.
    let (_, tree, _) = c.cli(&["tree", &root]);
    assert!(
        tree.lines()
            .any(|l| l.contains(&child) && l.contains("activity=in-turn")),
        "{tree}"
    );
    assert!(
        tree.lines()
            .any(|l| l.starts_with(&root) && l.contains("activity=idle")),
        "{tree}"
    );
    let (_, show, _) = c.cli(&["show", &child]);
    assert!(show.contains("state     running, in a turn"), "{show}");
    let (_, status, _) = c.cli(&["status"]);
    assert!(
        status
            .lines()
            .any(|l| l.contains("node-2") && l.contains("(1 in a turn, 0 idle)")),
        "{status}"
    );
    // And node-2's /metrics.
    let (code, page) = c.nodes[1].http_get("/metrics").expect("metrics");
    assert_eq!(code, 200);
    assert!(
        page.contains("lineage_agents{lineage_node=\"node-2\",activity=\"in_turn\"} 1"),
        "{page}"
    );
    // node-1 timed the root's turn, which ended; every node names its build.
    let (_, page) = c.nodes[0].http_get("/metrics").expect("metrics");
    let turns = page
        .lines()
        .find_map(|l| {
            l.strip_prefix("lineage_turn_duration_seconds_count{lineage_node=\"node-1\"} ")
        })
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert!(turns.is_some_and(|n| n >= 1), "{page}");
    assert!(
        page.contains("lineage_build_info{lineage_node=\"node-1\",version=\""),
        "{page}"
    );
    // Its NATS connection: up, never made again.
    assert!(
        page.contains("lineage_nats_connected{lineage_node=\"node-1\"} 1"),
        "{page}"
    );
    assert!(
        page.contains("lineage_nats_reconnects_total{lineage_node=\"node-1\"} 0"),
        "{page}"
    );
}
