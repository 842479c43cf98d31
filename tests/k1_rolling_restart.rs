//! End to end, graceful shutdown (K1, X1, issue 15 "rolling restarts interrupt nothing"): a
//! rolling restart of all three nodes (SIGTERM, wait for the exit, start again, wait ready),
//! one at a time, while continuable children are mid-turn on every node, with a grace
//! (`shutdown.grace_ms`) longer than their turns, interrupts nothing: every turn ends
//! `completed`, every report and settlement reaches the parent exactly once, a followup sent to
//! a session while its node winds down is accepted and answered after the hand-off, and
//! followups after the restart are answered. A turn that outlives the grace, and only that
//! one, is interrupted (as a crash would).

use std::collections::BTreeMap;
use std::time::Duration;

use lineage_testkit::cluster::tail;
use lineage_testkit::prelude::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(60);

/// How long each child's turn works.
const TURN_MS: u64 = 4000;

/// The children: each turn sleeps, reports (quiet) and replies with its input.
fn child_script() -> Value {
    json!({"turns": [[
        {"do": "sleep", "ms": TURN_MS},
        {"do": "report", "content": "progress"},
        {"do": "echo"}
    ]], "after": {"do": "repeat_last"}})
}

/// `lineage send` to `session`; the reply's outcome, after checking it succeeded.
fn send(c: &Cluster, session: &str, text: &str) -> String {
    let (code, out, err) = c.cli(&["--json", "send", session, text]);
    assert_eq!(code, 0, "send {text} to {session}: {out}{err}");
    let reply: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    reply["outcome"].as_str().unwrap_or_default().to_owned()
}

/// Waits until `session`'s log holds `n` turn starts and the last one has not ended yet.
fn wait_mid_turn(c: &Cluster, session: &str, n: usize) {
    c.wait_log(session, T, &format!("turn {n} under way"), |l| {
        of_kind(l, "turn/start").len() == n && of_kind(l, "turn/end").len() == n - 1
    });
}

/// Waits until `session`'s log holds a reply `text`.
fn wait_reply(c: &Cluster, session: &str, text: &str) -> Vec<Event> {
    c.wait_log(session, T, &format!("the reply {text:?}"), |l| {
        l.iter()
            .any(|e| e.kind == "turn/assistant" && e.data["text"] == text)
    })
}

/// No turn of `log` ended `interrupted` and no settlement it captured says so.
fn assert_nothing_interrupted(session: &str, log: &[Event]) {
    for e in of_kind(log, "turn/end") {
        assert_eq!(
            e.data["stop_reason"],
            "completed",
            "{session}: a turn did not complete:\n{}",
            render_log(log)
        );
    }
    for e in of_kind(log, "outbox/settled") {
        assert_eq!(
            e.data["stop_reason"],
            "completed",
            "{session}: settled as {}:\n{}",
            e.data["stop_reason"],
            render_log(log)
        );
    }
}

/// What `child`'s log says it sent (`outbox/<kind>` seqs) arrived in `parent_log`, each seq
/// exactly once, and nothing else from it. Returns how many.
fn assert_arrived_once(child: &str, child_log: &[Event], parent_log: &[Event]) -> usize {
    let mut sent: Vec<u64> = ["outbox/report", "outbox/settled"]
        .iter()
        .flat_map(|k| of_kind(child_log, k))
        .filter_map(|e| e.data["seq"].as_u64())
        .collect();
    sent.sort_unstable();
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    for kind in ["subagent-report", "subagent-settled"] {
        for e in accepted(parent_log, kind, Some(child)) {
            let id = e.data["dedup_id"].as_str().unwrap_or_default().to_owned();
            *got.entry(id).or_default() += 1;
        }
    }
    let expected: BTreeMap<String, usize> = sent
        .iter()
        .map(|seq| (format!("{child}-{seq}"), 1))
        .collect();
    assert_eq!(
        got,
        expected,
        "{child}: what it sent vs what its parent accepted\nparent:\n{}",
        render_log(parent_log)
    );
    sent.len()
}

#[test]
fn k1_x1_a_rolling_restart_interrupts_nothing_that_finishes_within_the_grace() {
    let grace = Duration::from_secs(20);
    let mut c = Cluster::start_with_env(3, &[("LINEAGE_SHUTDOWN__GRACE_MS", "20000")]);
    // A root on node-1 with one continuable child on every node; the root echoes whatever its
    // children's settlements bring.
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[
            spawn_step("continuable", "node-1", "work-0", child_script()),
            spawn_step("continuable", "node-2", "work-0", child_script()),
            spawn_step("continuable", "node-3", "work-0", child_script()),
        ]], "after": {"do": "echo"}}),
    );
    let tree = wait_for(T, "three children", || {
        let t = c.tree(&root);
        (t.len() == 4).then_some(t)
    });
    let kids = Cluster::children(&tree, &root);
    for (i, kid) in kids.iter().enumerate() {
        assert_eq!(
            c.row(&root, kid)["node"],
            format!("node-{}", i + 1),
            "child {i} placed"
        );
    }
    let mut turns = vec![1usize; kids.len()];
    for kid in &kids {
        c.wait_state(&root, kid, "settled", T);
    }

    // Restart node-1, node-2, node-3 in turn, each while every child is mid-turn.
    for (round, index) in [0usize, 1, 2].into_iter().enumerate() {
        let text = format!("work-{}", round + 1);
        for (k, kid) in kids.iter().enumerate() {
            let outcome = send(&c, kid, &text);
            assert!(
                ["delivered", "resumed_and_delivered"].contains(&outcome.as_str()),
                "{outcome}"
            );
            turns[k] += 1;
            wait_mid_turn(&c, kid, turns[k]);
        }
        let node = format!("node-{}", index + 1);
        let hosted: Vec<usize> = (0..kids.len())
            .filter(|k| c.row(&root, &kids[*k])["node"] == node.as_str())
            .collect();
        assert!(!hosted.is_empty(), "{node} hosts a child mid-turn");
        let stopping = std::time::Instant::now();
        c.nodes[index].sigterm();
        // A followup to a child the stopping node hosts, during its grace: accepted (queued in
        // the child's log), and its turn runs on the next host after the hand-off.
        let queued = format!("during-grace-{}", round + 1);
        let during = send(&c, &kids[hosted[0]], &queued);
        assert_eq!(during, "delivered", "a followup during the grace is queued");
        turns[hosted[0]] += 1;
        let code = c.wait_stopped(index, grace + Duration::from_secs(15));
        let took = stopping.elapsed();
        assert_eq!(code, 0, "{node} exits cleanly:\n{}", c.logs());
        assert!(
            took < grace,
            "{node} took {took:?}: its turns end well within the grace"
        );
        let node_log = c.nodes[index].log_text();
        assert!(
            node_log.contains("handed off the sessions hosted here"),
            "{}",
            tail(&node_log, 40)
        );
        wait_reply(&c, &kids[hosted[0]], &queued);
        c.restart(index);
        c.wait_ready(T);
        for (k, kid) in kids.iter().enumerate() {
            c.wait_log(kid, T, "every turn so far ended", |l| {
                of_kind(l, "turn/end").len() == turns[k]
            });
            c.wait_state(&root, kid, "settled", T);
        }
    }

    // Followups after the restarts are answered.
    for (k, kid) in kids.iter().enumerate() {
        let outcome = send(&c, kid, "after-restart");
        assert!(
            ["delivered", "resumed_and_delivered"].contains(&outcome.as_str()),
            "{outcome}"
        );
        turns[k] += 1;
        wait_reply(&c, kid, "after-restart");
        c.wait_state(&root, kid, "settled", T);
    }

    // Nothing interrupted anywhere; every report and settlement reached the root once. (A turn
    // that ended with a followup queued is followed by that turn, not by a settlement.)
    let settled: Vec<usize> = kids
        .iter()
        .map(|kid| of_kind(&c.log(kid), "outbox/settled").len())
        .collect();
    let root_log = c.wait_log(&root, T, "every report and settlement accepted", |l| {
        kids.iter()
            .zip(turns.iter().zip(&settled))
            .all(|(kid, (n, s))| {
                accepted(l, "subagent-settled", Some(kid.as_str())).len() == *s
                    && accepted(l, "subagent-report", Some(kid.as_str())).len() == *n
            })
    });
    assert_nothing_interrupted(&root, &root_log);
    for ((kid, n), s) in kids.iter().zip(&turns).zip(&settled) {
        let log = c.log(kid);
        assert_nothing_interrupted(kid, &log);
        assert_eq!(of_kind(&log, "turn/end").len(), *n, "{}", render_log(&log));
        assert_eq!(
            of_kind(&log, "outbox/report").len(),
            *n,
            "one report a turn"
        );
        assert_eq!(assert_arrived_once(kid, &log, &root_log), n + s);
        for notice in accepted(&root_log, "subagent-settled", Some(kid)) {
            let summary = notice.data["message"]["summary"].as_str().unwrap_or("");
            assert!(!summary.contains("interrupted"), "{summary}");
        }
    }
}

#[test]
fn k1_only_a_turn_that_outlives_the_grace_is_interrupted() {
    let grace = Duration::from_secs(6);
    let mut c = Cluster::start_with_env(3, &[("LINEAGE_SHUTDOWN__GRACE_MS", "6000")]);
    let quick =
        json!({"turns": [[{"do": "sleep", "ms": 3000}, {"do": "reply", "content": "quick done"}]]});
    let slow = json!({"turns": [[{"do": "reply", "content": "slow started"}, {"do": "sleep", "ms": 120000}]]});
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[
            spawn_step("continuable", "node-2", "quick", quick),
            spawn_step("continuable", "node-2", "slow", slow),
        ]], "after": {"do": "echo"}}),
    );
    let tree = wait_for(T, "two children", || {
        let t = c.tree(&root);
        (t.len() == 3).then_some(t)
    });
    let kids = Cluster::children(&tree, &root);
    let (quick, slow) = (kids[0].clone(), kids[1].clone());
    wait_mid_turn(&c, &quick, 1);
    wait_reply(&c, &slow, "slow started");

    let (code, took) = c.graceful_stop(1, grace + Duration::from_secs(15));
    assert_eq!(code, 0, "{}", c.logs());
    assert!(
        took >= grace,
        "node-2 waited the grace for the slow turn: {took:?}"
    );
    // The quick turn finished within the grace: settled, completed, told to the root.
    c.wait_state(&root, &quick, "settled", T);
    let log = c.log(&quick);
    assert_nothing_interrupted(&quick, &log);
    assert_eq!(of_kind(&log, "turn/end").len(), 1, "{}", render_log(&log));

    // node-2 comes back and re-adopts the slow one: its turn was cut short, so it is closed as
    // interrupted and settles so; the root hears of both, once each.
    c.restart(1);
    c.wait_ready(T);
    c.wait_state(&root, &slow, "settled", T);
    let log = c.log(&slow);
    let ends = of_kind(&log, "turn/end");
    assert_eq!(ends.len(), 1, "{}", render_log(&log));
    assert_eq!(ends[0].data["stop_reason"], "interrupted");
    let root_log = c.wait_log(&root, T, "both settlements", |l| {
        [&quick, &slow]
            .iter()
            .all(|k| accepted(l, "subagent-settled", Some(k.as_str())).len() == 1)
    });
    let stop_of = |kid: &str| {
        accepted(&root_log, "subagent-settled", Some(kid))[0].data["message"]["summary"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert!(
        !stop_of(&quick).contains("interrupted"),
        "{}",
        stop_of(&quick)
    );
    assert!(stop_of(&slow).contains("interrupted"), "{}", stop_of(&slow));
    assert_arrived_once(&quick, &c.log(&quick), &root_log);
    assert_arrived_once(&slow, &c.log(&slow), &root_log);
}
