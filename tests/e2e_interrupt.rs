//! End to end, interrupt (M4, R3): allowed for the user acting for the target's parent and for
//! a verified ancestor, across nodes; refused (exit 4, one line, nothing changes) for siblings
//! and other non-ancestors, through the CLI and the NATS service alike.

use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::json;

const T: Duration = Duration::from_secs(25);

fn sleeper() -> serde_json::Value {
    json!({"turns": [[{"do": "sleep", "ms": 60000}]]})
}

/// Asserts an `interrupt` CLI call is refused: exit 4, one `error:` line naming the rule.
fn assert_refused(c: &Cluster, args: &[&str]) {
    let mut all = vec!["interrupt"];
    all.extend_from_slice(args);
    let (code, out, err) = c.cli(&all);
    assert_eq!(
        code, 4,
        "lineage {all:?}: expected exit 4 (refused)\nstdout: {out}\nstderr: {err}"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].starts_with("error: not authorized:"), "{err}");
    assert!(out.trim().is_empty(), "nothing on stdout: {out}");
}

#[test]
fn m4_r3_interrupt_authority_across_nodes() {
    let c = Cluster::start(3);
    // ROOT (node-1) -> C1 (node-2) -> {G1 (node-3), G2 (node-1)}; ROOT -> C2 (node-3).
    let c1 = json!({"turns": [[
        spawn_step("continuable", "node-3", "g1", sleeper()),
        spawn_step("continuable", "node-1", "g2", sleeper()),
    ]]});
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[
            spawn_step("continuable", "node-2", "c1", c1),
            spawn_step("continuable", "node-3", "c2", sleeper()),
        ]]}),
    );
    let tree = wait_for(T, "five sessions", || {
        let tree = c.tree(&root);
        (tree.len() == 5).then_some(tree)
    });
    let kids = Cluster::children(&tree, &root);
    let (c1, c2) = (kids[0].clone(), kids[1].clone());
    let grand = Cluster::children(&tree, &c1);
    assert_eq!(grand.len(), 2, "{tree:?}");
    let (g1, g2) = (grand[0].clone(), grand[1].clone());
    for id in [&g1, &g2, &c2] {
        c.wait_log(id, T, "its first turn", |l| {
            !of_kind(l, "turn/start").is_empty()
        });
    }
    let g2_before = c.log(&g2).len();
    let c1_before = c.log(&c1).len();

    // Refused: a sibling of the target's parent, a sibling of the target, a non-parent user.
    assert_refused(&c, &[&g2, "--as-ancestor", &c2]);
    assert_refused(&c, &[&g2, "--as-ancestor", &g1]);
    assert_refused(&c, &[&c1, "--as-user", &c2]);
    assert_refused(&c, &[&g2, "--as-user", &g1]);
    assert_refused(&c, &[&g2, "--as-user", &root]);
    assert_refused(&c, &[&root, "--as-ancestor", &g1]);
    let (_, _, err) = c.cli(&["interrupt", &g2, "--as-ancestor", &g1]);
    assert!(
        err.contains(&format!("{g1} is a sibling of {g2}")),
        "the error says why: {err}"
    );
    let (_, _, err) = c.cli(&["interrupt", &g2, "--as-ancestor", &c2]);
    assert!(
        err.contains("is not a known ancestor of"),
        "the error says why: {err}"
    );
    // The same through the NATS service.
    let body = json!({"target": g2, "authority": {"kind": "ancestor", "session": c2}});
    let reply = c.ctl("interrupt", body.to_string().as_bytes());
    assert_eq!(reply["v"], 1, "{reply}");
    assert_eq!(reply["error"]["code"], "refused", "{reply}");
    assert!(reply.get("result").is_none(), "{reply}");
    // Nothing changed: G2 and C1 still in their turns, their logs untouched.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.log(&g2).len(), g2_before, "{}", render_log(&c.log(&g2)));
    assert_eq!(c.log(&c1).len(), c1_before);
    for id in [&g1, &g2, &c2] {
        let row = c.row(&root, id);
        assert_eq!(
            (row["state"].as_str(), row["live"].as_bool()),
            (Some("running"), Some(true)),
            "{row}"
        );
    }

    // Allowed: the user acting for G1's parent (G1 on node-3, asked through any node).
    let reply = c.cli_json(&["interrupt", &g1, "--as-user", &c1]);
    assert_eq!(reply["outcome"], "cancelled", "{reply}");
    assert_eq!(reply["node"], "node-3", "{reply}");
    let log = c.wait_log(&g1, T, "an interrupted turn", |l| {
        l.iter()
            .any(|e| e.kind == "turn/end" && e.data["stop_reason"] == "interrupted")
    });
    assert_eq!(of_kind(&log, "turn/end").len(), 1, "{}", render_log(&log));
    // Its parent C1 (node-2) hears of it (the interrupted child settles, M2).
    c.wait_log(&c1, T, "G1's settlement", |l| {
        !accepted(l, "subagent-settled", Some(&g1)).is_empty()
    });

    // Allowed: the root as a verified ancestor of the grandchild G2 (two nodes away).
    let reply = c.cli_json(&["interrupt", &g2, "--as-ancestor", &root]);
    assert_eq!(reply["outcome"], "cancelled", "{reply}");
    assert_eq!(reply["node"], "node-1", "{reply}");
    c.wait_log(&g2, T, "an interrupted turn", |l| {
        l.iter()
            .any(|e| e.kind == "turn/end" && e.data["stop_reason"] == "interrupted")
    });
    // The direct parent may interrupt as an ancestor too (C1 over G2, now idle or cold): in
    // words, exit 0 when it is live and idle, exit 3 (not found) when it is not live anywhere.
    let (code, out, err) = c.cli(&["interrupt", &g2, "--as-ancestor", &c1]);
    match code {
        0 => assert!(
            out.starts_with(&format!(
                "nothing to cancel: {g2} is live on node-1 but no turn is running"
            )),
            "{out}"
        ),
        3 => {
            assert_eq!(err.trim().lines().count(), 1, "{err}");
            assert!(
                err.starts_with(&format!(
                    "error: nothing to cancel: {g2} is not live on any node"
                )),
                "{err}"
            );
        }
        _ => panic!("exit {code}\nstdout: {out}\nstderr: {err}"),
    }
    assert!(
        !out.contains("NothingRunning") && !err.contains("NotLive"),
        "no enum names"
    );
    // C2 was never touched.
    let row = c.row(&root, &c2);
    assert_eq!(row["state"], "running", "{row}");
    assert!(of_kind(&c.log(&c2), "turn/end").is_empty());

    // O3 (issue 15): `lineage send` says what happened in words, not enum names.
    let (code, out, err) = c.cli(&["send", &c2, "later", "--request-id", "words-1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("delivered to {c2} on node-3"));
    let (code, out, err) = c.cli(&["send", &c2, "later", "--request-id", "words-1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        format!("already delivered: this request id was accepted before by {c2} on node-3; nothing was added")
    );
}
