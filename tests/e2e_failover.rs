//! End to end, node failures: a continuable child whose node is SIGKILLed mid-turn is
//! cold-resumed elsewhere (K1, R2, L3, S3); a parent whose node was down gets every report
//! queued meanwhile, exactly once (N2, M1, M2); a node that restarts re-adopts its sessions and
//! settles a turn its stop cut short as `interrupted` (K1, X2).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lineage_testkit::prelude::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn k1_r2_sigkilled_node_child_resumes_elsewhere_and_settles_to_parent() {
    let mut c = Cluster::start(3);
    // Two continuable children on node-2, each in a long first turn; a followup gives the
    // second turn, which works a moment (so the resumed agent can be seen live) and replies.
    let child = json!({"turns": [
        [{"do": "sleep", "ms": 120000}],
        [{"do": "sleep", "ms": 4000}, {"do": "echo"}]
    ]});
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[
            spawn_step("continuable", "node-2", "a", child.clone()),
            spawn_step("continuable", "node-2", "b", child),
        ]], "after": {"do": "echo"}}),
    );
    let tree = wait_for(T, "two children", || {
        let t = c.tree(&root);
        (t.len() == 3).then_some(t)
    });
    let kids = Cluster::children(&tree, &root);
    let (a, b) = (kids[0].clone(), kids[1].clone());
    for id in [&a, &b] {
        c.wait_log(id, T, "the first turn", |l| {
            !of_kind(l, "turn/start").is_empty()
        });
        let row = c.row(&root, id);
        assert_eq!(
            (row["node"].as_str(), row["epoch"].as_u64()),
            (Some("node-2"), Some(1))
        );
    }

    // SIGKILL node-2 mid-turn; wait for its lease (2 s) to expire.
    c.nodes[1].kill();
    c.wait_lease("node-2", false, T);
    for id in [&a, &b] {
        let row = c.row(&root, id);
        assert_eq!(
            (row["state"].as_str(), row["live"].as_bool()),
            (Some("running"), Some(false)),
            "{row}"
        );
    }
    // A spawn under A while its node is down: unavailable (exit 5), in one line, not "not found".
    let (code, out, err) = c.cli(&["spawn", "--parent", &a, "--shape", "one-shot"]);
    assert_eq!(code, 5, "stdout: {out}\nstderr: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("session {a} runs on node node-2, which is down")),
        "{err}"
    );

    // `lineage send` resumes A wherever the request lands (node-1 or node-3).
    let sent = c.cli_json(&["send", &a, "after the crash"]);
    assert_eq!(sent["outcome"], "resumed_and_delivered", "{sent}");
    let node = sent["node"].as_str().unwrap().to_owned();
    assert_ne!(node, "node-2");
    let row = c.row(&root, &a);
    assert_eq!(row["node"], node.as_str(), "{row}");
    assert_eq!(row["epoch"], 2, "{row}");
    assert_eq!(row["live"], true, "{row}");
    // The runtime owner is the parent only where the parent is live (node-1); else none (R2).
    let owner = if node == "node-1" {
        json!(root)
    } else {
        Value::Null
    };
    assert_eq!(row["owner"], owner, "{row}");

    // B is resumed on node-3 by a raw per-node followup: the parent lives on node-1, so the
    // resumed child has no runtime owner; a second claim elsewhere loses (K1, one winner).
    let body = json!({"session": b, "content": "resume on node-3"});
    let reply = c.node_ctl("node-3", "followup", body.to_string().as_bytes());
    assert_eq!(
        reply["result"]["outcome"], "resumed_and_delivered",
        "{reply}"
    );
    assert_eq!(reply["result"]["node"], "node-3", "{reply}");
    let row = c.row(&root, &b);
    assert_eq!(
        (row["node"].as_str(), row["epoch"].as_u64()),
        (Some("node-3"), Some(2)),
        "{row}"
    );
    assert_eq!(row["owner"], Value::Null, "{row}");
    assert_eq!(row["live"], true, "{row}");
    let lost = c.node_ctl(
        "node-1",
        "resume",
        json!({"session": b}).to_string().as_bytes(),
    );
    assert_eq!(lost["error"]["code"], "refused", "{lost}");
    assert!(
        lost["error"]["message"]
            .as_str()
            .unwrap()
            .contains("node-3"),
        "{lost}"
    );

    // Both finish their resumed turn on the log they left (turn 1, L3) and settle; the
    // settlements reach the parent on node-1.
    for (id, text) in [(&a, "after the crash"), (&b, "resume on node-3")] {
        let log = c.wait_log(id, T, "the resumed turn", |l| {
            l.iter()
                .any(|e| e.kind == "turn/assistant" && e.data["text"] == text)
        });
        let starts = of_kind(&log, "turn/start");
        assert_eq!(starts.len(), 2, "{}", render_log(&log));
        assert_eq!(starts[1].data["index"], 1);
        c.wait_state(&root, id, "settled", T);
    }
    let log = c.wait_log(&root, T, "both settlements, each read by a turn", |l| {
        [&a, &b].iter().all(|id| {
            let got = accepted(l, "subagent-settled", Some(id.as_str()));
            got.len() == 1 && !turns_consuming(l, got[0].seq).is_empty()
        })
    });
    for id in [&a, &b] {
        let s = accepted(&log, "subagent-settled", Some(id))[0];
        assert_eq!(s.data["message"]["kind"], "subagent-settled");
        assert_eq!(
            turns_consuming(&log, s.seq).len(),
            1,
            "{}",
            render_log(&log)
        );
    }

    // node-2 comes back: it hosts nothing, and the resumed children stay where they are.
    c.restart(1);
    c.wait_ready(Duration::from_secs(60));
    c.wait_lease("node-2", true, T);
    for (id, node) in [(&a, node.as_str()), (&b, "node-3")] {
        let row = c.row(&root, id);
        assert_eq!(
            (row["node"].as_str(), row["epoch"].as_u64()),
            (Some(node), Some(2)),
            "{row}"
        );
    }
}

#[test]
fn n2_m1_m2_cold_parent_gets_every_queued_report_once() {
    let mut c = Cluster::start(3);
    // The parent P lives on node-3; its children on node-1 and node-2 report (quiet and
    // wakeup) after 5 s, then settle: by then node-3 is down.
    let kid = |tag: &str| {
        json!({"turns": [[
            {"do": "sleep", "ms": 5000},
            {"do": "report", "content": format!("{tag}-quiet"), "delivery": "quiet"},
            {"do": "report", "content": format!("{tag}-wakeup"), "delivery": "wakeup"},
            {"do": "reply", "text": format!("{tag} done")}
        ]]})
    };
    let p = c.spawn_root(
        "node-3",
        &json!({"turns": [[
            spawn_step("continuable", "node-1", "k1", kid("k1")),
            spawn_step("continuable", "node-2", "k2", kid("k2")),
        ]], "after": {"do": "echo"}}),
    );
    let tree = wait_for(T, "two children", || {
        let t = c.tree(&p);
        (t.len() == 3).then_some(t)
    });
    c.wait_log(&p, T, "the spawning turn's end", |l| {
        !of_kind(l, "turn/end").is_empty()
    });
    c.nodes[2].terminate();
    let down_at = now_ms();
    let before = c.log(&p);
    let kids = Cluster::children(&tree, &p);
    for id in &kids {
        c.wait_state(&p, id, "settled", T);
        let log = c.log(id);
        let first = of_kind(&log, "outbox/report")[0].at_ms;
        assert!(
            first > down_at,
            "the scenario needs the reports to come after node-3 stopped"
        );
    }
    // Nothing reached P while its node was down.
    assert_eq!(c.log(&p).len(), before.len(), "{}", render_log(&c.log(&p)));

    c.restart(2);
    c.wait_ready(Duration::from_secs(60));
    c.wait_lease("node-3", true, T);
    // node-3 re-adopts P at start-up (no followup needed): claimed again, epoch 2, and its
    // inbox consumer picks up what was queued.
    wait_for(T, "P re-adopted on node-3", || {
        let r = c.row(&p, &p);
        (r["live"] == true && r["epoch"] == 2 && r["node"] == "node-3").then_some(())
    });
    let sent = c.cli_json(&["send", &p, "back"]);
    assert_eq!(sent["node"], "node-3", "{sent}");
    assert_eq!(sent["outcome"], "delivered", "{sent}");
    assert_eq!(c.row(&p, &p)["epoch"], 2);

    // Every queued report and settlement, accepted once, each read by exactly one turn.
    let expected: Vec<String> = kids
        .iter()
        .flat_map(|k| (1..=3).map(move |seq| format!("{k}-{seq}")))
        .collect();
    c.wait_log(&p, T, "six inbox messages, all read", |l| {
        let ids: Vec<&Value> = l
            .iter()
            .filter(|e| e.kind == "inbox/accepted" && !e.data["dedup_id"].is_null())
            .map(|e| &e.data["dedup_id"])
            .collect();
        ids.len() >= expected.len()
            && l.iter()
                .filter(|e| e.kind == "inbox/accepted")
                .all(|e| !turns_consuming(l, e.seq).is_empty())
    });
    // A second resume and another followup change nothing about the old messages.
    let resumed = c.node_ctl(
        "node-3",
        "resume",
        json!({"session": p}).to_string().as_bytes(),
    );
    assert_eq!(resumed["result"]["outcome"], "already_live", "{resumed}");
    let again = c.cli_json(&["send", &p, "once more"]);
    assert_eq!(again["outcome"], "delivered", "{again}");
    let log = c.wait_log(&p, T, "the last followup read", |l| {
        l.iter()
            .any(|e| e.kind == "turn/assistant" && e.data["text"] == "once more")
    });
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for e in log.iter().filter(|e| e.kind == "inbox/accepted") {
        if let Some(id) = e.data["dedup_id"].as_str() {
            *counts.entry(id.to_owned()).or_default() += 1;
        }
    }
    let want: BTreeMap<String, usize> = expected.iter().map(|id| (id.clone(), 1)).collect();
    assert_eq!(counts, want, "{}", render_log(&log));
    for e in log.iter().filter(|e| e.kind == "inbox/accepted") {
        assert_eq!(
            turns_consuming(&log, e.seq).len(),
            1,
            "seq {} read once:\n{}",
            e.seq,
            render_log(&log)
        );
    }
    // The transcript holds each report once.
    for k in &kids {
        let reports = of_kind(&c.log(k), "outbox/report")
            .iter()
            .map(|e| e.data["content"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>();
        assert_eq!(reports.len(), 2);
        for content in reports {
            let text = format!("report from {k}: {content}");
            let n = log
                .iter()
                .filter(|e| e.kind == "turn/user" && e.data["text"] == text)
                .count();
            assert_eq!(n, 1, "{text}:\n{}", render_log(&log));
        }
    }
}

/// A parent on node-1 and its continuable child on `node`, caught mid-turn (after its first
/// reply, in a two-minute sleep). Returns (parent, child).
fn child_mid_turn(c: &Cluster, node: &str) -> (String, String) {
    let child =
        json!({"turns": [[{"do": "reply", "text": "started"}, {"do": "sleep", "ms": 120000}]]});
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[spawn_step("continuable", node, "a", child)]], "after": {"do": "echo"}}),
    );
    let tree = wait_for(T, "one child", || {
        let t = c.tree(&root);
        (t.len() == 2).then_some(t)
    });
    let a = Cluster::children(&tree, &root)[0].clone();
    c.wait_log(&a, T, "the child's first reply", |l| {
        !of_kind(l, "turn/assistant").is_empty()
    });
    (root, a)
}

/// The child came back on `node` (claimed again: epoch 2), the turn its node's stop cut short
/// ended as `interrupted` (and was not replayed), it settled, and its parent got the notice,
/// once, saying so.
fn assert_settled_as_interrupted(c: &Cluster, root: &str, a: &str, node: &str) {
    c.wait_state(root, a, "settled", T);
    let row = c.row(root, a);
    assert_eq!(
        (row["node"].as_str(), row["epoch"].as_u64()),
        (Some(node), Some(2)),
        "{row}"
    );
    let log = c.log(a);
    let ends = of_kind(&log, "turn/end");
    assert_eq!(ends.len(), 1, "{}", render_log(&log));
    assert_eq!(
        ends[0].data["stop_reason"],
        "interrupted",
        "{}",
        render_log(&log)
    );
    assert_eq!(of_kind(&log, "turn/start").len(), 1, "no turn is replayed");
    let root_log = c.wait_log(root, T, "the child's settlement", |l| {
        !accepted(l, "subagent-settled", Some(a)).is_empty()
    });
    let notices = accepted(&root_log, "subagent-settled", Some(a));
    assert_eq!(notices.len(), 1, "{}", render_log(&root_log));
    let summary = notices[0].data["message"]["summary"].as_str().unwrap_or("");
    assert!(summary.contains("interrupted"), "{summary}");
}

#[test]
fn k1_x2_restarted_node_readopts_its_sessions_and_settles_a_cut_short_turn() {
    let mut c = Cluster::start(3);
    let (root, a) = child_mid_turn(&c, "node-2");
    // A top-level session on node-2 too.
    let top = c.spawn_root(
        "node-2",
        &json!({"turns": [[{"do": "reply", "text": "up"}]]}),
    );
    assert_eq!(c.row(&top, &top)["epoch"], 1);

    // SIGKILL node-2 and start it again on its data dir; nobody resumes anything meanwhile:
    // node-2 re-adopts both.
    c.nodes[1].kill();
    c.restart(1);
    c.wait_ready(Duration::from_secs(60));
    assert_settled_as_interrupted(&c, &root, &a, "node-2");

    // The top-level session is live on node-2 again (no activation: it just waits for input).
    let top_row = wait_for(T, "the top-level session live again", || {
        let r = c.row(&top, &top);
        (r["live"] == true).then_some(r)
    });
    assert_eq!(
        (
            top_row["node"].as_str(),
            top_row["epoch"].as_u64(),
            top_row["state"].as_str()
        ),
        (Some("node-2"), Some(2), Some("running")),
        "{top_row}"
    );
}

#[test]
fn k1_x2_a_dead_nodes_sessions_are_taken_over_and_a_cut_short_turn_settles() {
    // Takeover 0.5 s after a lease expires (the default is 30 s).
    let mut c = Cluster::start_with_env(3, &[("LINEAGE_LEASE__TAKEOVER_AFTER_MS", "500")]);
    let (root, a) = child_mid_turn(&c, "node-3");
    // node-3 dies for good. Nobody sends a followup: node-1, the live node with the smallest
    // id, takes the child over once node-3's lease is 0.5 s past.
    c.nodes[2].kill();
    assert_settled_as_interrupted(&c, &root, &a, "node-1");
    // A followup still works: the settled child is resumed for it, anywhere.
    let sent = c.cli_json(&["send", &a, "go on"]);
    assert_eq!(sent["outcome"], "resumed_and_delivered", "{sent}");
}

#[test]
fn s1_k1_a_one_shot_whose_node_dies_fails_fast_and_is_disposed() {
    let c = Cluster::start(3);
    let root = c.spawn_root("node-1", &json!({"turns": []}));
    // A one-shot on node-2 that would run for two minutes; node-1 serves the spawn request.
    let body = json!({"parent": root, "shape": "one-shot", "node": "node-2", "prompt": "work",
        "agent": {"driver": "script", "script": {"turns": [[{"do": "sleep", "ms": 120000}]]}}});
    std::thread::scope(|scope| {
        let pending = scope.spawn(|| {
            let started = std::time::Instant::now();
            let reply = c.node_ctl("node-1", "spawn", body.to_string().as_bytes());
            (reply, started.elapsed())
        });
        let child = wait_for(T, "the one-shot running on node-2", || {
            c.tree(&root)
                .iter()
                .find(|r| r["session"] != root.as_str() && r["live"] == true)
                .map(|r| id_of(&r["session"]))
        });
        // SIGKILL node-2 (by pid, outside the harness: the request above holds the cluster).
        let pid = c.nodes[1].pid().expect("node-2 runs");
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        // The caller hears of it once node-2's lease (2 s) has expired, not after the one-shot
        // timeout (5 min), and the child is disposed.
        let (reply, took) = pending.join().expect("the spawn request");
        assert_eq!(reply["error"]["code"], "unavailable", "{reply}");
        let message = reply["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("node-2") && !message.contains('\n'),
            "{message}"
        );
        assert!(took < Duration::from_secs(15), "took {took:?}");
        c.wait_state(&root, &child, "disposed", T);
    });
}

#[test]
fn x1_k1_a_one_shot_whose_node_and_caller_die_together_is_disposed_when_the_node_comes_back() {
    // Issue 12 (`lineage chaos`, seed 21): a root on node-2 spawns a one-shot on node-2, then
    // node-2 is SIGKILLed. The caller that would dispose the one-shot died with it, and a
    // one-shot is never resumed: before, it stayed `running` for good (an orphan). Now the
    // node's re-adoption disposes it and publishes its end.
    let mut c = Cluster::start(3);
    let child_script =
        json!({"turns": [[{"do": "sleep", "ms": 120000}, {"do": "reply", "text": "late"}]]});
    let root = c.spawn_root(
        "node-2",
        &json!({"turns": [[spawn_step("one-shot", "node-2", "work", child_script)]],
                "after": {"do": "echo"}}),
    );
    let child = wait_for(T, "the one-shot running on node-2", || {
        c.tree(&root)
            .iter()
            .find(|r| r["session"] != root.as_str() && r["live"] == true)
            .map(|r| id_of(&r["session"]))
    });
    c.nodes[1].kill();
    c.restart(1);
    c.wait_ready(Duration::from_secs(60));
    let row = wait_for(T, "the orphaned one-shot disposed", || {
        let r = c.row(&root, &child);
        (r["state"] == "disposed").then_some(r)
    });
    assert_eq!(row["live"], false, "{row}");
    // The root itself is adopted again and takes input.
    let sent = c.cli_json(&["send", &root, "still there?"]);
    assert!(
        sent["outcome"]
            .as_str()
            .is_some_and(|o| o.contains("delivered")),
        "{sent}"
    );
}

#[test]
fn x1_k1_a_one_shot_caller_hears_when_the_one_shots_node_restarts_before_its_lease_lapses() {
    // Issue 12 (noticed in the chaos runs): a root on node-1 spawns a one-shot on node-2, and
    // node-2 is SIGKILLed and restarted before its lease (10 s here) lapses. The restarted
    // node's re-adoption disposes the orphaned one-shot, but the caller only watched for a
    // lapsed lease: its spawn waited for the one-shot timeout (5 min). Now it also watches the
    // child, and hears within a lease period that it ended with no answer.
    let mut c = Cluster::start_with_env(3, &[("LINEAGE_LEASE__LEASE_MS", "10000")]);
    let child_script =
        json!({"turns": [[{"do": "sleep", "ms": 120000}, {"do": "reply", "text": "late"}]]});
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[spawn_step("one-shot", "node-2", "work", child_script)]],
                "after": {"do": "echo"}}),
    );
    let child = wait_for(T, "the one-shot running on node-2", || {
        c.tree(&root)
            .iter()
            .find(|r| r["session"] != root.as_str() && r["live"] == true)
            .map(|r| id_of(&r["session"]))
    });
    c.nodes[1].kill();
    c.restart(1);
    c.wait_ready(Duration::from_secs(60));
    c.wait_state(&root, &child, "disposed", T);
    let log = c.wait_log(&root, T, "the caller told of the one-shot's end", |l| {
        !of_kind(l, "subagent/spawn-refused").is_empty()
    });
    let refused = of_kind(&log, "subagent/spawn-refused");
    let error = refused[0].data["error"].as_str().unwrap_or("");
    assert!(
        error.contains(&child) && error.contains("node-2") && !error.contains('\n'),
        "{error}"
    );
    // The root's turn is over: it takes input again.
    let sent = c.cli_json(&["send", &root, "still there?"]);
    assert!(
        sent["outcome"]
            .as_str()
            .is_some_and(|o| o.contains("delivered")),
        "{sent}"
    );
}
