//! End to end, bad input through the CLI and the NATS service alike: unknown sessions
//! (not_found, exit 3), closed admission (X1, G2: refused, exit 4), depth exceeded (D3, G2:
//! refused, exit 4), invalid max depth (D4: bad_request, exit 2) and malformed JSON (N3:
//! bad_request). Every error is one line and changes nothing.

use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(25);
const UNKNOWN: &str = "01936c1e-7a3b-7cde-8f00-000000000001";

/// Runs the CLI (with and without `--json`) and checks the exit code, the one error line and
/// the JSON error code; returns the error line.
fn expect_error(c: &Cluster, args: &[&str], exit: i32, code: &str) -> String {
    let (got, out, err) = c.cli(args);
    assert_eq!(
        got, exit,
        "lineage {args:?}: exit {got}, want {exit}\nstdout: {out}\nstderr: {err}"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "lineage {args:?}: one error line, got: {err}"
    );
    assert!(lines[0].starts_with("error: "), "{err}");
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (got, out, _) = c.cli(&all);
    assert_eq!(got, exit, "lineage {all:?}");
    let body: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(body["error"]["code"], code, "{body}");
    lines[0].to_owned()
}

/// Checks a raw service reply is `{"v":1,"error":{"code":code,..}}` with a one-line message.
fn expect_reply_error(reply: &Value, code: &str) -> String {
    assert_eq!(reply["v"], 1, "{reply}");
    assert_eq!(reply["error"]["code"], code, "{reply}");
    assert!(reply.get("result").is_none(), "{reply}");
    let message = reply["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(!message.contains('\n'), "{message}");
    message
}

fn counts(c: &Cluster) -> Value {
    c.cli_json(&["status"])["sessions"].clone()
}

/// Closes admission on `root`'s subtree with a direct registry write (what a drain does first).
fn close_admission(c: &Cluster, root: &str) {
    use lineage_core::ids::{RequestId, SessionId};
    let bus = c.bus();
    let registry = lineage_registry::RegistryClient::new(bus.client.clone(), c.cluster.clone());
    let closed = bus
        .rt
        .block_on(registry.close_admission(
            RequestId::parse("e2e-close-admission").unwrap(),
            0,
            vec![SessionId::parse(root).unwrap()],
        ))
        .expect("close admission");
    assert!(!closed.is_empty());
}

fn script_agent() -> Value {
    agent(json!({"turns": [[{"do": "reply", "text": "hi"}]]}))
}

#[test]
fn n3_d3_d4_x1_bad_input_cli_and_service() {
    let c = Cluster::start(3);

    // Unknown session: not_found, exit 3, for every verb that names one.
    let e = expect_error(&c, &["send", UNKNOWN, "hi"], 3, "not_found");
    assert!(e.contains(UNKNOWN), "{e}");
    expect_error(&c, &["tree", UNKNOWN], 3, "not_found");
    expect_error(&c, &["drain", UNKNOWN], 3, "not_found");
    expect_error(
        &c,
        &["interrupt", UNKNOWN, "--as-user", UNKNOWN],
        3,
        "not_found",
    );
    expect_error(
        &c,
        &["spawn", "--parent", UNKNOWN, "--shape", "one-shot"],
        3,
        "not_found",
    );
    for (op, body) in [
        ("followup", json!({"session": UNKNOWN, "content": "hi"})),
        ("drain", json!({"roots": [UNKNOWN]})),
        ("resume", json!({"session": UNKNOWN})),
        (
            "spawn",
            json!({"parent": UNKNOWN, "shape": "one-shot", "agent": script_agent()}),
        ),
    ] {
        expect_reply_error(&c.ctl(op, body.to_string().as_bytes()), "not_found");
    }
    // Not an id at all: a usage error.
    expect_error(&c, &["send", "not-a-session", "hi"], 2, "bad_request");
    let reply = c.ctl("followup", br#"{"session":"not-a-session","content":"hi"}"#);
    expect_reply_error(&reply, "bad_request");

    // Closed admission: a drained root takes no child, through the CLI and the service.
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "ready"}]]}),
    );
    let drained = c.cli_json(&["drain", &root]);
    assert_eq!(
        drained["waves"].as_array().map(Vec::len),
        Some(1),
        "{drained}"
    );
    assert_eq!(c.row(&root, &root)["state"], "disposed");
    let before = counts(&c);
    let e = expect_error(
        &c,
        &[
            "spawn",
            "--parent",
            &root,
            "--shape",
            "continuable",
            "--node",
            "node-2",
        ],
        4,
        "refused",
    );
    assert!(e.contains("disposed") && e.contains(root.as_str()), "{e}");
    let reply = c.ctl(
        "spawn",
        json!({"parent": root, "shape": "one-shot", "agent": script_agent()})
            .to_string()
            .as_bytes(),
    );
    let m = expect_reply_error(&reply, "refused");
    assert!(m.contains("disposed"), "{m}");
    let e = expect_error(&c, &["send", &root, "hi"], 4, "refused");
    assert!(e.contains("disposed"), "{e}");
    assert_eq!(counts(&c), before, "a refused spawn changes nothing");
    assert_eq!(c.tree(&root).len(), 1);

    // Closed admission above a live parent (a drain began): the registry's flag is enough to
    // refuse, whichever node serves the request (the parent's own, or another one).
    let open_root = c.spawn_root(
        "node-1",
        &json!({"turns": [[spawn_step("continuable", "node-2", "work", json!({"turns": [[{"do": "sleep", "ms": 60000}]]}))]]}),
    );
    let tree = wait_for(T, "the child", || {
        let t = c.tree(&open_root);
        (t.len() == 2).then_some(t)
    });
    let live_kid = Cluster::children(&tree, &open_root)[0].clone();
    close_admission(&c, &open_root);
    let before = counts(&c);
    for parent in [&open_root, &live_kid] {
        for _ in 0..3 {
            let e = expect_error(
                &c,
                &["spawn", "--parent", parent, "--shape", "one-shot"],
                4,
                "refused",
            );
            assert!(
                e.contains(&format!("admission is closed at {parent}")),
                "{e}"
            );
        }
        let reply = c.ctl(
            "spawn",
            json!({"parent": parent, "shape": "continuable", "agent": script_agent()})
                .to_string()
                .as_bytes(),
        );
        expect_reply_error(&reply, "refused");
    }
    assert_eq!(counts(&c), before, "a refused spawn changes nothing");
    assert_eq!(c.row(&open_root, &live_kid)["live"], true);

    // Depth: a tree with max depth 1 takes children but no grandchildren; the refused
    // grandchild spawn from the child's own turn is feedback in its log.
    let child = json!({"turns": [[
        spawn_step("one-shot", "node-1", "too deep", json!({"turns": [[{"do": "reply", "text": "no"}]]})),
        {"do": "sleep", "ms": 60000}
    ]]});
    let text = json!({"turns": [[spawn_step("continuable", "node-2", "work", child)]]}).to_string();
    let shallow = c.spawn(&[
        "--node",
        "node-1",
        "--max-depth",
        "1",
        "--prompt",
        "go",
        "--script",
        &text,
    ]);
    let shallow = id_of(&shallow["session"]);
    let tree = wait_for(T, "the child", || {
        let t = c.tree(&shallow);
        (t.len() == 2).then_some(t)
    });
    let kid = Cluster::children(&tree, &shallow)[0].clone();
    let log = c.wait_log(&kid, T, "the refused spawn", |l| {
        !of_kind(l, "subagent/spawn-refused").is_empty()
    });
    let refused = of_kind(&log, "subagent/spawn-refused")[0].data["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(refused.contains("depth 2 exceeds max depth 1"), "{refused}");
    let before = counts(&c);
    let e = expect_error(
        &c,
        &[
            "spawn", "--parent", &kid, "--shape", "one-shot", "--node", "node-3",
        ],
        4,
        "refused",
    );
    assert!(e.contains("depth 2 exceeds max depth 1"), "{e}");
    let reply = c.ctl(
        "spawn",
        json!({"parent": kid, "shape": "continuable", "agent": script_agent()})
            .to_string()
            .as_bytes(),
    );
    expect_reply_error(&reply, "refused");
    // A request may lower the cap but never raise it: max depth 0 refuses even a child.
    expect_error(
        &c,
        &[
            "spawn",
            "--parent",
            &shallow,
            "--shape",
            "one-shot",
            "--max-depth",
            "0",
        ],
        4,
        "refused",
    );
    assert_eq!(counts(&c), before, "refused spawns change nothing");
    assert_eq!(c.tree(&shallow).len(), 2);

    // Invalid max depth: rejected before anything is created (D4).
    for bad in [
        "-1",
        "1.5",
        "\"x\"",
        "x",
        "-0",
        "NaN",
        "9007199254740992",
        "1e3",
        "",
    ] {
        let e = expect_error(&c, &["spawn", "--max-depth", bad], 2, "bad_request");
        assert!(e.contains("--max-depth"), "{bad}: {e}");
    }
    for bad in [
        json!(-1),
        json!(1.5),
        json!("x"),
        json!(-0.0),
        json!(9007199254740992u64),
        json!(null),
        json!([1]),
        json!(true),
    ] {
        let body = json!({"max_depth": bad, "agent": script_agent()});
        let reply = c.ctl("spawn", body.to_string().as_bytes());
        if bad.is_null() {
            // `null` means "not given".
            assert!(reply.get("result").is_some(), "{reply}");
            continue;
        }
        let m = expect_reply_error(&reply, "bad_request");
        assert!(
            m.contains("max_depth") || m.contains("max depth"),
            "{bad}: {m}"
        );
    }
    let after_nulls = counts(&c);

    // Malformed JSON on every cluster op: bad_request naming the op; nothing changes.
    for op in [
        "spawn",
        "followup",
        "interrupt",
        "drain",
        "resume",
        "status",
    ] {
        let m = expect_reply_error(&c.ctl(op, b"{not json"), "bad_request");
        assert!(m.contains(op), "{m}");
    }
    for (op, body) in [
        ("spawn", json!({"agent": script_agent(), "bogus": 1})),
        ("spawn", json!({"prompt": "no agent"})),
        ("followup", json!({"session": UNKNOWN})),
        (
            "interrupt",
            json!({"target": UNKNOWN, "authority": {"kind": "god"}}),
        ),
        ("drain", json!({"roots": []})),
    ] {
        expect_reply_error(&c.ctl(op, body.to_string().as_bytes()), "bad_request");
    }
    expect_error(&c, &["spawn", "--script", "{not json"], 2, "bad_request");
    expect_error(
        &c,
        &["spawn", "--script", r#"{"turns":[[{"do":"dance"}]]}"#],
        2,
        "bad_request",
    );
    assert_eq!(counts(&c), after_nulls, "malformed requests change nothing");
}
