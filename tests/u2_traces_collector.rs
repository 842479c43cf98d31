//! A tree is one trace, in a real collector (issue 36, U2, O2). Three node processes (the trees
//! use two of them) export over OTLP
//! to Jaeger (`lineage_testkit::jaeger`, built by `scripts/install-deps.sh`), and the test reads
//! the trace back through Jaeger's query API, as its UI does.
//!
//! - http/protobuf: a tree of three levels on two nodes (a root on node-1, its child on node-2,
//!   the grandchild on node-1) started by a CLI spawn in a trace the test names is that one
//!   trace. Each turn is an `invoke_agent` span in the GenAI conventions, each child's turn
//!   hangs under the turn that spawned it (through `spawn` on the parent's node and `start` on
//!   the child's), and a tree started in an unsampled trace is not exported at all.
//! - gRPC over TLS (the collector's certificate signed by a CA the nodes are given with
//!   `OTEL_EXPORTER_OTLP_CERTIFICATE`), with `OTEL_SERVICE_NAME`: the same parentage arrives.

use std::time::Duration;

use lineage_testkit::jaeger::{ancestry, Jaeger, ReceiverTls, Span};
use lineage_testkit::prelude::*;
use serde_json::{json, Value};

/// A root that spawns a continuable child on `child_node`, which spawns one on
/// `grandchild_node`; each waits for its child before it replies.
fn three_levels(child_node: &str, grandchild_node: &str) -> Value {
    let grandchild = json!({"turns": [[{"do": "reply", "text": "deep"}]]});
    let child = json!({"turns": [[
        spawn_step("continuable", grandchild_node, "dig", grandchild),
        {"do": "await_children", "timeout_ms": 20000},
        {"do": "reply", "text": "child done"}
    ]]});
    json!({"turns": [[
        spawn_step("continuable", child_node, "look", child),
        {"do": "await_children", "timeout_ms": 30000},
        {"do": "reply", "text": "root done"}
    ]]})
}

/// `lineage spawn` of a root on `node` running `script`, in the trace of `traceparent`.
fn spawn_root_traced(c: &Cluster, node: &str, script: &Value, traceparent: &str) -> String {
    let (code, out, err) = c.cli_env(
        &[("TRACEPARENT", traceparent)],
        &[
            "--json",
            "spawn",
            "--node",
            node,
            "--prompt",
            "go",
            "--script",
            &script.to_string(),
        ],
    );
    assert_eq!(code, 0, "spawn failed: {err}\n{out}\n{}", c.logs());
    let reply: Value = serde_json::from_str(out.trim()).expect("spawn --json");
    id_of(&reply["session"])
}

/// The turn spans (`invoke_agent`) of the trace, by session.
fn turns(spans: &[Span]) -> Vec<(String, &Span)> {
    spans
        .iter()
        .filter(|s| s.text("gen_ai.operation.name").as_deref() == Some("invoke_agent"))
        .filter_map(|s| Some((s.text("gen_ai.conversation.id")?, s)))
        .collect()
}

/// Waits until the trace holds a finished turn of each of `sessions`; returns its spans.
fn wait_for_turns(jaeger: &Jaeger, trace_id: &str, sessions: usize) -> Vec<Span> {
    wait_for(
        Duration::from_secs(40),
        format!("the turns of {sessions} sessions in trace {trace_id}"),
        || {
            let spans = jaeger
                .trace(trace_id)
                .map(|t| t.spans())
                .unwrap_or_default();
            let mut seen: Vec<String> = turns(&spans).into_iter().map(|(s, _)| s).collect();
            seen.sort();
            seen.dedup();
            if seen.len() >= sessions {
                Ok(spans)
            } else {
                Err(format!("sessions with a turn so far: {seen:?}"))
            }
        },
    )
}

/// Asserts that `child`'s first turn hangs under `parent`'s turn, through a `spawn` span on
/// `parent_node` and a `start` span on `child_node`; returns the chain's names.
fn assert_under(
    spans: &[Span],
    parent: &str,
    child: &str,
    parent_node: &str,
    child_node: &str,
) -> Vec<String> {
    let all = turns(spans);
    let child_turn = all
        .iter()
        .find(|(s, _)| s == child)
        .map(|(_, span)| *span)
        .unwrap_or_else(|| panic!("no turn of {child} in {spans:#?}"));
    let chain = ancestry(spans, child_turn);
    let names: Vec<String> = chain
        .iter()
        .map(|s| format!("{}@{}", s.name, s.node.as_deref().unwrap_or("?")))
        .collect();
    let parent_turn = chain
        .iter()
        .position(|s| s.text("gen_ai.conversation.id").as_deref() == Some(parent))
        .unwrap_or_else(|| panic!("{parent}'s turn is not above {child}'s: {names:?}"));
    assert_eq!(
        names[..=parent_turn],
        [
            format!("invoke_agent script@{child_node}"),
            format!("start@{child_node}"),
            format!("spawn@{parent_node}"),
            format!("invoke_agent script@{parent_node}"),
        ],
        "{child}'s turn, its start, the spawn and {parent}'s turn, in that order"
    );
    names
}

#[test]
fn u2_o2_a_tree_of_three_levels_on_two_nodes_is_one_trace_in_jaeger() {
    let jaeger = Jaeger::start(None);
    let c = Cluster::start_with_env(3, &[("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.http.as_str())]);

    // A tree started in an unsampled trace first: with the default sampler (parent based) no
    // node exports any of its spans.
    let unsampled = "0af7651916cd43dd8448eb211c80319c";
    let quiet_root = spawn_root_traced(
        &c,
        "node-1",
        &three_levels("node-2", "node-1"),
        &format!("00-{unsampled}-b7ad6b7169203331-00"),
    );

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = "00f067aa0ba902b7";
    let root = spawn_root_traced(
        &c,
        "node-1",
        &three_levels("node-2", "node-1"),
        &format!("00-{trace_id}-{caller}-01"),
    );
    let spans = wait_for_turns(&jaeger, trace_id, 3);
    let sessions: Vec<String> = c
        .tree(&root)
        .iter()
        .map(|row| id_of(&row["session"]))
        .collect();
    assert_eq!(sessions.len(), 3, "{sessions:?}");
    let (child, grandchild) = {
        let tree = c.tree(&root);
        let child = Cluster::children(&tree, &root).pop().expect("a child");
        let grandchild = Cluster::children(&tree, &child)
            .pop()
            .expect("a grandchild");
        (child, grandchild)
    };

    // Each turn in the GenAI conventions, on the node that hosts the session.
    for (session, node) in [
        (&root, "node-1"),
        (&child, "node-2"),
        (&grandchild, "node-1"),
    ] {
        let (_, turn) = turns(&spans)
            .into_iter()
            .find(|(s, _)| s == session)
            .unwrap_or_else(|| panic!("no turn of {session}"));
        assert_eq!(turn.name, "invoke_agent script");
        assert_eq!(turn.text("gen_ai.agent.name").as_deref(), Some("script"));
        assert_eq!(turn.node.as_deref(), Some(node), "{turn:?}");
        assert_eq!(turn.service, "lineage");
        assert_eq!(
            turn.text("span.kind").as_deref(),
            Some("internal"),
            "{turn:?}"
        );
    }
    // The parentage: root's turn > spawn (node-1) > start (node-2) > child's turn > spawn
    // (node-2) > start (node-1) > grandchild's turn; the root's turn under the CLI's request,
    // under the caller's span.
    assert_under(&spans, &child, &grandchild, "node-2", "node-1");
    let names = assert_under(&spans, &root, &child, "node-1", "node-2");
    let root_turn = turns(&spans)
        .into_iter()
        .find(|(s, _)| s == &root)
        .map(|(_, span)| span)
        .unwrap();
    let top = ancestry(&spans, root_turn);
    assert_eq!(
        top.last().and_then(|s| s.parent.as_deref()),
        Some(caller),
        "the tree's first span hangs under the caller's span: {names:?} {top:#?}"
    );
    // The settlement reaches the parent's node in the same trace.
    wait_for(
        Duration::from_secs(20),
        "the child's settlement accepted on node-1",
        || {
            let spans = jaeger
                .trace(trace_id)
                .map(|t| t.spans())
                .unwrap_or_default();
            spans
                .iter()
                .any(|s| {
                    s.name == "inbox"
                        && s.node.as_deref() == Some("node-1")
                        && s.text("sender").as_deref() == Some(child.as_str())
                })
                .then_some(())
        },
    );

    // The unsampled tree ran too, and left nothing in the collector (the sampled tree after it
    // was exported, so its spans would have been).
    wait_for(
        Duration::from_secs(20),
        "the unsampled tree's three sessions",
        || (c.tree(&quiet_root).len() == 3).then_some(()),
    );
    assert!(
        jaeger.trace(unsampled).is_none(),
        "nothing of an unsampled trace is exported: {:?}",
        jaeger.trace(unsampled)
    );
}

/// A CA and a certificate it signs for 127.0.0.1 and localhost (openssl), in `dir`.
fn certificates(dir: &std::path::Path) -> (std::path::PathBuf, ReceiverTls) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=lineage test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
    (
        dir.join("ca.pem"),
        ReceiverTls {
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        },
    )
}

#[test]
fn u2_o2_grpc_over_tls_carries_the_tree_to_jaeger() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, tls) = certificates(certs.path());
    let jaeger = Jaeger::start(Some(tls));
    let endpoint = format!("https://{}", jaeger.grpc.replace("127.0.0.1", "localhost"));
    let ca = ca.display().to_string();
    let c = Cluster::start_with_env(
        3,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.as_str()),
            ("OTEL_SERVICE_NAME", "agents"),
        ],
    );
    let trace_id = "a3ce929d0e0e47364bf92f3577b34da6";
    let root = spawn_root_traced(
        &c,
        "node-2",
        &json!({"turns": [[
            spawn_step("continuable", "node-1", "look",
                json!({"turns": [[{"do": "reply", "text": "found"}]]})),
            {"do": "await_children", "timeout_ms": 20000},
            {"do": "reply", "text": "root done"}
        ]]}),
        &format!("00-{trace_id}-00f067aa0ba902b7-01"),
    );
    let spans = wait_for_turns(&jaeger, trace_id, 2);
    let child = Cluster::children(&c.tree(&root), &root)
        .pop()
        .expect("a child");
    assert_under(&spans, &root, &child, "node-2", "node-1");
    assert!(
        spans.iter().all(|s| s.service == "agents"),
        "OTEL_SERVICE_NAME names the service: {spans:#?}"
    );
    assert!(
        !c.logs().contains("trace export is off"),
        "export started on every node:\n{}",
        c.logs()
    );
}
