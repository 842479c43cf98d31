//! End to end, drain (X1, H2, X2): a live tree of depth 4 and fan-out 3 (1 + 3 + 9 + 27 + 81 =
//! 121 sessions) spread over three nodes is drained; every session is disposed, children
//! before parents, as the registry records it. A drain that names a progress id publishes its
//! plan and each wave's progress on `lineage.<cluster>.drain.<id>.progress` before its reply
//! (N3, O3), and `lineage drain` on a terminal draws them as live bars.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lineage_core::drain::verify_child_first;
use lineage_core::ids::SessionId;
use lineage_testkit::prelude::*;
use serde_json::{json, Value};

const DEPTH: u32 = 4;
const FAN_OUT: u32 = 3;

/// The script of a session at `depth`: spawn `FAN_OUT` continuable children, round-robin over
/// the nodes, each running the next level; leaves stay in a long turn (live until drained).
fn level(depth: u32) -> Value {
    level_of(depth, DEPTH)
}

/// [`level`] for a tree whose leaves are at depth `max`.
fn level_of(depth: u32, max: u32) -> Value {
    if depth == max {
        return json!({"turns": [[{"do": "sleep", "ms": 300000}]]});
    }
    let steps: Vec<Value> = (0..FAN_OUT)
        .map(|i| {
            let node = format!("node-{}", (i + depth) % 3 + 1);
            spawn_step("continuable", &node, "work", level_of(depth + 1, max))
        })
        .collect();
    json!({"turns": [steps]})
}

/// Waits until the tree of `root` has `total` sessions, all live.
fn wait_live(c: &Cluster, root: &str, total: usize) {
    wait_for(
        Duration::from_secs(60),
        format!("{total} live sessions under {root}"),
        || {
            let tree = c.tree(root);
            let live = tree
                .iter()
                .filter(|r| {
                    r["live"] == true && r["state"] != "settled" && r["state"] != "disposed"
                })
                .count();
            (tree.len() == total && live == total).then_some(())
        },
    );
}

fn sid(v: &Value) -> SessionId {
    SessionId::parse(v.as_str().expect("id")).expect("session id")
}

#[test]
fn x1_h2_drain_depth4_fanout3_tree_child_first() {
    let c = Cluster::start(3);
    let total: usize = (0..=DEPTH).map(|d| FAN_OUT.pow(d) as usize).sum();
    assert_eq!(total, 121);
    let started = Instant::now();
    let root = c.spawn_root("node-1", &level(0));
    // The whole tree is live: leaves in their turn, inner sessions waiting on their children.
    let tree = wait_for(Duration::from_secs(60), "121 live sessions", || {
        let tree = c.tree(&root);
        let live = tree
            .iter()
            .filter(|r| r["live"] == true && r["state"] != "settled" && r["state"] != "disposed")
            .count();
        (tree.len() == total && live == total).then_some(tree)
    });
    let built = started.elapsed();
    let mut per_depth = BTreeMap::new();
    let mut per_node = BTreeMap::new();
    for r in &tree {
        *per_depth.entry(r["depth"].as_u64().unwrap()).or_insert(0) += 1;
        *per_node
            .entry(r["node"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    assert_eq!(
        per_depth,
        BTreeMap::from([(0, 1), (1, 3), (2, 9), (3, 27), (4, 81)])
    );
    assert_eq!(per_node.len(), 3, "spread over three nodes: {per_node:?}");
    assert!(per_node.values().all(|n| *n >= 30), "{per_node:?}");

    // Drain the root.
    let t0 = Instant::now();
    let report = c.cli_json(&["drain", &root]);
    let took = t0.elapsed();
    assert_eq!(
        report["closed"].as_array().map(Vec::len),
        Some(total),
        "{report}"
    );
    let order: Vec<SessionId> = report["waves"]
        .as_array()
        .expect("waves")
        .iter()
        .flat_map(|w| {
            w.as_array()
                .expect("wave")
                .iter()
                .map(|d| sid(&d["session"]))
        })
        .collect();
    assert_eq!(order.len(), total, "{report}");
    assert_eq!(
        report["waves"].as_array().unwrap().len(),
        DEPTH as usize + 1,
        "{report}"
    );
    assert!(
        report["warnings"].as_array().unwrap().is_empty(),
        "{report}"
    );
    // Under the report's cap: every disposal listed; the counts agree.
    assert_eq!(report["truncated"], false, "{report}");
    assert_eq!(report["closed_count"], total, "{report}");
    assert_eq!(report["totals"]["released"], total, "{report}");
    assert_eq!(
        report["summary"].as_array().map(Vec::len),
        Some(DEPTH as usize + 1),
        "{report}"
    );
    let released = report["waves"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w.as_array().unwrap())
        .filter(|d| d["kind"] == "released")
        .count();
    assert_eq!(
        released, total,
        "every live session is released on its node: {report}"
    );

    // The registry: all disposed, none live, each child disposed no later than its parent.
    let after = c.tree(&root);
    assert_eq!(after.len(), total);
    for r in &after {
        assert_eq!(r["state"], "disposed", "{r}");
        assert_eq!(r["admission"], "closed", "{r}");
        assert_eq!(r["live"], false, "{r}");
    }
    let parents: BTreeMap<SessionId, SessionId> = after
        .iter()
        .filter(|r| !r["parent"].is_null())
        .map(|r| (sid(&r["session"]), sid(&r["parent"])))
        .collect();
    verify_child_first(&order, &parents).expect("the drain report disposes children first");
    let at: BTreeMap<SessionId, u64> = after
        .iter()
        .map(|r| {
            (
                sid(&r["session"]),
                r["updated_at_ms"].as_u64().expect("updated_at_ms"),
            )
        })
        .collect();
    for (child, parent) in &parents {
        assert!(
            at[child] <= at[parent],
            "{child} disposed at {} after its parent {parent} at {}",
            at[child],
            at[parent]
        );
    }
    // The registry's own disposal times, ordered (ties broken deepest first), pass the same check.
    let depth: BTreeMap<SessionId, u64> = after
        .iter()
        .map(|r| (sid(&r["session"]), r["depth"].as_u64().unwrap()))
        .collect();
    let mut by_time: Vec<SessionId> = at.keys().cloned().collect();
    by_time.sort_by_key(|s| (at[s], std::cmp::Reverse(depth[s])));
    verify_child_first(&by_time, &parents).expect("registry disposal times are child-first");

    // No node hosts anything any more; a leaf's turn was cancelled and it settled `disposed`.
    let status = c.cli_json(&["status"]);
    for n in status["nodes"].as_array().unwrap() {
        assert_eq!(n["live_agents"], 0, "{status}");
    }
    let leaf = after.iter().find(|r| r["depth"] == DEPTH).unwrap();
    let log = c.log(leaf["session"].as_str().unwrap());
    let ends = of_kind(&log, "turn/end");
    assert_eq!(ends.len(), 1, "{}", render_log(&log));
    assert_ne!(
        ends[0].data["stop_reason"],
        "completed",
        "{}",
        render_log(&log)
    );
    let settled = of_kind(&log, "outbox/settled");
    assert_eq!(settled.len(), 1, "{}", render_log(&log));
    assert_eq!(
        settled[0].data["stop_reason"],
        "disposed",
        "{}",
        render_log(&log)
    );
    eprintln!("built {total} sessions in {built:?}, drained in {took:?}");
    assert!(took < Duration::from_secs(60), "drain took {took:?}");
}

/// What the test's subscriber saw around one drain request: each progress message, then the
/// reply, in the order the test's connection delivered them.
enum Seen {
    Progress(Value),
    Reply(Value),
}

/// Subscribes to `progress` on the test's own connection, then sends the raw `drain` request
/// `body` on the same connection, and records progress messages and the reply in arrival
/// order: the subscription is polled first, so a message delivered before the reply is
/// recorded before it. After the reply it listens 500 ms more for stragglers.
fn drain_watching(c: &Cluster, progress: &str, body: &Value) -> Vec<Seen> {
    use futures::{FutureExt, StreamExt};
    let bus = c.bus();
    let control = format!("lineage.{}.ctl.drain", c.cluster);
    let payload = body.to_string().into_bytes();
    bus.rt.block_on(async {
        let mut sub = bus
            .client
            .subscribe(progress.to_owned())
            .await
            .expect("subscribe");
        bus.client.flush().await.expect("flush");
        let reply = tokio::time::timeout(
            Duration::from_secs(60),
            bus.client.request(control, payload.into()),
        );
        tokio::pin!(reply);
        let mut seen = Vec::new();
        loop {
            tokio::select! {
                biased;
                Some(msg) = sub.next() => {
                    seen.push(Seen::Progress(serde_json::from_slice(&msg.payload).expect("progress JSON")));
                }
                r = &mut reply => {
                    let msg = r.expect("a drain reply within 60 s").expect("drain request");
                    seen.push(Seen::Reply(serde_json::from_slice(&msg.payload).expect("reply JSON")));
                    break;
                }
            }
        }
        while let Some(Some(msg)) = sub.next().now_or_never() {
            seen.push(Seen::Progress(serde_json::from_slice(&msg.payload).unwrap()));
        }
        let late = tokio::time::timeout(Duration::from_millis(500), sub.next()).await;
        if let Ok(Some(msg)) = late {
            seen.push(Seen::Progress(serde_json::from_slice(&msg.payload).unwrap()));
        }
        let _ = sub.unsubscribe().await;
        seen
    })
}

/// Every tree row is still open for admission and live: nothing was drained.
fn assert_untouched(c: &Cluster, root: &str, total: usize) {
    let tree = c.tree(root);
    assert_eq!(tree.len(), total);
    for r in &tree {
        assert_eq!(r["admission"], "open", "{r}");
        assert_eq!(r["live"], true, "{r}");
        assert_ne!(r["state"], "disposed", "{r}");
    }
}

/// What a terminal shows for text with `\r` redraws: per line, the last drawn content.
fn visible_lines(text: &str) -> Vec<String> {
    text.split('\n')
        .map(|line| {
            line.split('\r')
                .rfind(|part| !part.is_empty())
                .unwrap_or("")
                .to_owned()
        })
        .filter(|line| !line.is_empty())
        .collect()
}

#[test]
fn x1_n3_drain_publishes_live_progress_per_wave() {
    let c = Cluster::start(3);
    // Three trees: depth 2 (1 + 3 + 9 = 13 sessions, 3 waves) for the raw protocol, and two of
    // depth 1 (4 sessions, 2 waves) for the CLI on a terminal and off one.
    let big = c.spawn_root("node-1", &level_of(0, 2));
    let tty = c.spawn_root("node-2", &level_of(0, 1));
    let pipe = c.spawn_root("node-3", &level_of(0, 1));
    wait_live(&c, &big, 13);
    wait_live(&c, &tty, 4);
    wait_live(&c, &pipe, 4);

    // An invalid progress id: one-line bad_request, and nothing drained (admission still open).
    for bad in ["a.b", "*", ">", "a b", ""] {
        let reply = c.ctl(
            "drain",
            json!({"roots": [big], "progress": bad})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(reply["error"]["code"], "bad_request", "{bad:?}: {reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains("drain id"), "{bad:?}: {message}");
        assert!(!message.contains('\n'), "one line: {message}");
        assert!(reply.get("result").is_none(), "{reply}");
    }
    assert_untouched(&c, &big, 13);

    // A valid one: plan, then every wave in order, all before the reply.
    let id = "01936c1e-7a3b-7cde-8f00-0000000000d1";
    let subject = format!("lineage.{}.drain.{id}.progress", c.cluster);
    let seen = drain_watching(&c, &subject, &json!({"roots": [big], "progress": id}));
    let reply_at = seen
        .iter()
        .position(|s| matches!(s, Seen::Reply(_)))
        .expect("a reply");
    let Seen::Reply(reply) = &seen[reply_at] else {
        unreachable!()
    };
    assert!(reply.get("error").is_none(), "{reply}");
    let report = &reply["result"];
    let progress: Vec<&Value> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Progress(p) => Some(p),
            Seen::Reply(_) => None,
        })
        .collect();
    assert_eq!(
        reply_at,
        seen.len() - 1,
        "every progress message arrives before the reply: {progress:?}"
    );
    assert!(
        progress.len() >= 7,
        "plan + start and end of 3 waves: {progress:?}"
    );
    for p in &progress {
        assert_eq!(p["v"], 1, "{p}");
        assert_eq!(p["drain"], id, "{p}");
    }
    let summary = report["summary"].as_array().expect("summary");
    let waves = summary.len();
    assert_eq!(waves, 3, "{report}");
    let sizes: Vec<u64> = summary
        .iter()
        .map(|w| {
            w["counts"]["released"].as_u64().unwrap()
                + w["counts"]["registry_only"].as_u64().unwrap()
                + w["counts"]["already_disposed"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(sizes, vec![9, 3, 1], "{report}");
    // The plan first: waves and their sizes, as the report counts them.
    let plan = progress[0];
    assert_eq!(plan["phase"], "planned", "{plan}");
    assert_eq!(plan["waves"], waves, "{plan}");
    assert_eq!(plan["total"], 13, "{plan}");
    assert_eq!(plan["sizes"], json!(sizes), "{plan}");
    // Then per wave, in order: a start at 0, progress never going back, one end at done == total.
    let mut wave = 0usize;
    let mut done = 0u64;
    let mut started = false;
    for p in &progress[1..] {
        assert_eq!(p["waves"], waves, "{p}");
        assert_eq!(p["wave"], wave, "waves in order: {progress:?}");
        assert_eq!(p["total"], sizes[wave], "{p}");
        let d = p["done"].as_u64().unwrap();
        if !started {
            assert_eq!((p["phase"].as_str(), d), (Some("disposing"), 0), "{p}");
            started = true;
        }
        assert!(d >= done && d <= sizes[wave], "{progress:?}");
        done = d;
        match p["phase"].as_str() {
            Some("disposing") => {}
            Some("wave_done") => {
                assert_eq!(d, sizes[wave], "{p}");
                wave += 1;
                done = 0;
                started = false;
            }
            other => panic!("unexpected phase {other:?}: {p}"),
        }
    }
    assert_eq!(wave, waves, "every wave ended: {progress:?}");
    for r in c.tree(&big) {
        assert_eq!(r["state"], "disposed", "{r}");
    }

    // The CLI with stderr on a terminal (a pty from util-linux `script`): live bars on stderr,
    // the usual text on stdout.
    if Command::new("script").arg("--version").output().is_ok() {
        let out = c.path().join("drain-tty.out");
        let command = format!(
            "'{}' --nats '{}' --cluster '{}' drain {tty} > '{}'",
            lineage_bin().display(),
            c.nats.url(),
            c.cluster,
            out.display()
        );
        let run = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::null())
            .output()
            .expect("run script");
        let terminal = String::from_utf8_lossy(&run.stdout).into_owned();
        let stdout = std::fs::read_to_string(&out).unwrap_or_default();
        assert!(run.status.success(), "{terminal}\n{stdout}\n{}", c.logs());
        let lines = visible_lines(&terminal);
        let full = format!("[{}]", "#".repeat(40));
        assert_eq!(
            lines,
            vec![
                "draining 4 sessions in 2 waves".to_owned(),
                format!("wave  0 {full} 3/3"),
                format!("wave  1 {full} 1/1"),
            ],
            "{terminal:?}"
        );
        assert!(
            terminal.contains("\rwave  0 ["),
            "the current wave is redrawn in place: {terminal:?}"
        );
        assert!(stdout.contains("drained 4 sessions in 2 waves"), "{stdout}");
        assert!(!stdout.contains('\r'), "no bars on stdout: {stdout:?}");
        for r in c.tree(&tty) {
            assert_eq!(r["state"], "disposed", "{r}");
        }
    } else {
        eprintln!("util-linux `script` not found: the terminal half of this test is skipped");
    }

    // Off a terminal: no live bars, stdout as before.
    let (code, stdout, stderr) = c.cli(&["drain", &pipe]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr, "", "no live bars when stderr is not a terminal");
    assert!(stdout.contains("drained 4 sessions in 2 waves"), "{stdout}");
    assert!(stdout.starts_with("wave  0 [###"), "{stdout}");
    assert!(
        !stdout.contains("-:"),
        "no unexplained node column: {stdout}"
    );

    // Issue 15: draining it again disposes nothing and says the 4 were already disposed; the
    // totals add up to the sessions closed to admission.
    let (code, stdout, stderr) = c.cli(&["drain", &pipe]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("drained 0 sessions in 0 waves")
            && stdout.contains("0 released by their nodes, 0 not hosted (disposed in the registry), 4 already disposed; 4 closed to admission"),
        "{stdout}"
    );
    let again = c.cli_json(&["drain", &pipe]);
    assert_eq!(again["totals"]["already_disposed"], 4, "{again}");
    assert_eq!(again["closed_count"], 4, "{again}");
}
