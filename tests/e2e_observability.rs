//! End to end, observability (O2, U2): three node processes export spans over OTLP
//! (http/protobuf) to a real collector (Jaeger, `lineage_testkit::jaeger`) and serve
//! `/metrics`, `/healthz`, `/readyz`.
//!
//! One CLI spawn (with a known `TRACEPARENT`) of a child on node-2 under a root on node-1 must
//! show up in the collector's query API as spans from both nodes in that trace, linked parent
//! to child across the NATS hop; the nodes' `/metrics` must count the spawn, the report, the
//! settlement, the inbox acceptances, a cold resume and a drain, and show the registry's
//! session counts and Raft state.

use std::collections::BTreeSet;
use std::time::Duration;

use lineage_testkit::jaeger::{Jaeger, Span};
use lineage_testkit::prelude::*;
use serde_json::{json, Value};

/// The value of the first sample of `name` whose labels include all of `labels`.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn metrics(c: &Cluster, i: usize) -> String {
    match c.nodes[i].http_get("/metrics") {
        Some((200, body)) => body,
        other => panic!("{} /metrics: {other:?}", c.nodes[i].id),
    }
}

/// The sum of one metric over every node.
fn total(c: &Cluster, name: &str, labels: &[(&str, &str)]) -> f64 {
    (0..c.nodes.len())
        .filter_map(|i| metric(&metrics(c, i), name, labels))
        .sum()
}

#[test]
fn o2_traces_cross_nodes_and_metrics_count_the_lifecycle() {
    let jaeger = Jaeger::start(None);
    let c = Cluster::start_with_env(3, &[("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.http.as_str())]);

    // Probes.
    for node in &c.nodes {
        for path in ["/healthz", "/readyz"] {
            let got = node.http_get(path);
            assert_eq!(
                got.as_ref().map(|r| r.0),
                Some(200),
                "{} {path}: {got:?}\n{}",
                node.id,
                c.logs()
            );
        }
    }

    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "root up"}]], "after": {"do": "echo"}}),
    );

    // One CLI spawn of a child on node-2, in a trace we name.
    let trace_id = "5ce0e9a56015fec5aadfa328ae398115";
    let caller_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace_id}-{caller_span}-01");
    let script = json!({"turns": [[
        {"do": "report", "content": "halfway", "delivery": "quiet"},
        {"do": "reply", "text": "dug it"}
    ]]})
    .to_string();
    let (code, out, err) = c.cli_env(
        &[("TRACEPARENT", traceparent.as_str())],
        &[
            "--json",
            "spawn",
            "--parent",
            &root,
            "--shape",
            "continuable",
            "--node",
            "node-2",
            "--prompt",
            "dig",
            "--script",
            &script,
        ],
    );
    assert_eq!(code, 0, "spawn failed: {err}\n{out}\n{}", c.logs());
    let reply: Value = serde_json::from_str(out.trim()).expect("spawn --json");
    let child = id_of(&reply["session"]);
    assert_eq!(reply["node"], "node-2", "{reply}");
    c.wait_state(&root, &child, "settled", Duration::from_secs(20));
    c.wait_log(
        &root,
        Duration::from_secs(20),
        "the settlement notice",
        |l| {
            !accepted(l, "subagent-settled", Some(&child)).is_empty()
                && !accepted(l, "subagent-report", Some(&child)).is_empty()
        },
    );

    // The collector gets spans of that trace from node-1 and node-2.
    let spans = wait_for(
        Duration::from_secs(30),
        "spans of the CLI's trace from node-1 (spawn, inbox), node-2 (start, invoke_agent, report, settle) and the registry leader (registry.write)",
        || {
            let mine = jaeger.trace(trace_id).map(|t| t.spans()).unwrap_or_default();
            let has = |node: &str, name: &str| {
                mine.iter().any(|s| s.node.as_deref() == Some(node) && s.name == name)
            };
            // The settlement notice's inbox span, not just any (the report's comes first, and
            // the two may be exported in different batches).
            let settle_ids: Vec<&String> = mine
                .iter()
                .filter(|s| s.node.as_deref() == Some("node-2") && s.name == "settle")
                .map(|s| &s.id)
                .collect();
            let notice_taken = mine.iter().any(|s| {
                s.node.as_deref() == Some("node-1")
                    && s.name == "inbox"
                    && s.parent.as_ref().is_some_and(|p| settle_ids.contains(&p))
            });
            // The spawn the CLI asked for (the root's own spawn of its child is one too, and
            // may be exported in an earlier batch).
            let asked = mine
                .iter()
                .any(|s| s.parent.as_deref() == Some(caller_span) && s.name == "spawn");
            let all = has("node-1", "spawn")
                && asked
                && notice_taken
                && has("node-2", "start")
                && has("node-2", "invoke_agent script")
                && has("node-2", "report")
                && has("node-2", "settle")
                && mine.iter().any(|s| s.name == "registry.write");
            all.then_some(mine)
        },
    );
    let nodes: BTreeSet<&str> = spans.iter().filter_map(|s| s.node.as_deref()).collect();
    assert!(
        nodes.contains("node-1") && nodes.contains("node-2"),
        "one trace over two nodes: {nodes:?}"
    );
    assert!(spans.iter().all(|s| s.service == "lineage"), "{spans:#?}");
    let find = |node: &str, name: &str| {
        spans
            .iter()
            .filter(|s| s.node.as_deref() == Some(node) && s.name == name)
            .cloned()
            .collect::<Vec<Span>>()
    };
    // node-1's spawn (the parent lives there) names the child, its parent, the shape and the run.
    let spawn = find("node-1", "spawn")
        .into_iter()
        .find(|s| s.text("session").as_deref() == Some(child.as_str()))
        .unwrap_or_else(|| panic!("no node-1 spawn span for {child}: {spans:#?}"));
    assert_eq!(spawn.text("parent").as_deref(), Some(root.as_str()));
    assert_eq!(spawn.text("shape").as_deref(), Some("continuable"));
    assert_eq!(spawn.text("node").as_deref(), Some("node-1"));
    assert!(spawn.text("run").is_some(), "{spawn:?}");
    // The hop node-1 -> node-2 (per-node start request) keeps the parent link.
    let start = find("node-2", "start")
        .into_iter()
        .find(|s| s.text("session").as_deref() == Some(child.as_str()))
        .expect("node-2 start span of the child");
    assert_eq!(start.parent.as_ref(), Some(&spawn.id), "{start:?}");
    // The hosting node registered the birth with the registry leader (any node) in the same
    // trace: the member's `registry.write` span hangs under node-2's start span.
    let registry_writes: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "registry.write")
        .collect();
    assert!(
        registry_writes
            .iter()
            .any(|s| s.parent.as_ref() == Some(&start.id)),
        "a registry.write span is a child of the start span: {registry_writes:#?}"
    );
    assert_eq!(start.text("run"), spawn.text("run"));
    // The settlement on node-2 and its notice accepted on node-1 stay in the trace.
    let settle = find("node-2", "settle");
    assert!(
        settle
            .iter()
            .any(|s| s.text("session").as_deref() == Some(child.as_str())
                && s.text("stop_reason").as_deref() == Some("completed")),
        "{settle:#?}"
    );
    let inbox = find("node-1", "inbox");
    let settle_ids: Vec<&String> = settle.iter().map(|s| &s.id).collect();
    assert!(
        inbox
            .iter()
            .any(|s| s.text("session").as_deref() == Some(root.as_str())
                && s.text("sender").as_deref() == Some(child.as_str())
                && s.parent.as_ref().is_some_and(|p| settle_ids.contains(&p))),
        "the inbox span on node-1 is a child of the settle span on node-2: {inbox:#?}"
    );
    // The first span the CLI's request reached hangs under the caller's span.
    assert!(
        spans
            .iter()
            .any(|s| s.parent.as_deref() == Some(caller_span) && s.name == "spawn"),
        "a spawn span is a child of the TRACEPARENT span: {spans:#?}"
    );

    // Metrics on the nodes that did the work.
    let m1 = metrics(&c, 0);
    let m2 = metrics(&c, 1);
    let at_least = |text: &str, name: &str, labels: &[(&str, &str)], min: f64| {
        let v =
            metric(text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{text}"));
        assert!(v >= min, "{name}{labels:?} = {v}, want >= {min}\n{text}");
    };
    at_least(
        &m1,
        "lineage_spawns_total",
        &[("node", "node-1"), ("shape", "continuable")],
        1.0,
    );
    at_least(
        &m1,
        "lineage_inbox_accepted_total",
        &[("node", "node-1")],
        2.0,
    );
    at_least(
        &m1,
        "lineage_inbox_lag_seconds_count",
        &[("node", "node-1")],
        2.0,
    );
    at_least(
        &m1,
        "lineage_inbox_lag_seconds_sum",
        &[("node", "node-1")],
        0.0,
    );
    at_least(
        &m2,
        "lineage_settlements_total",
        &[("node", "node-2"), ("stop_reason", "completed")],
        1.0,
    );
    at_least(&m2, "lineage_reports_total", &[("node", "node-2")], 1.0);
    for text in [&m1, &m2] {
        at_least(text, "lineage_sessions", &[("state", "settled")], 1.0);
        at_least(text, "lineage_sessions", &[("state", "running")], 1.0);
        at_least(text, "lineage_raft_term", &[], 1.0);
        at_least(text, "lineage_raft_commit_index", &[], 1.0);
        at_least(text, "lineage_raft_leader", &[], 1.0);
        at_least(text, "lineage_otlp_spans_exported_total", &[], 1.0);
        // OpenMetrics: a counter family is named without `_total`, its samples with it;
        // latencies are histograms; the page ends with `# EOF`.
        assert!(
            text.contains("# TYPE lineage_settlements counter"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE lineage_inbox_lag_seconds histogram"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }

    // A followup to the settled child cold-resumes it somewhere.
    let (code, out, err) = c.cli(&["--json", "send", &child, "one more"]);
    assert_eq!(code, 0, "send failed: {err}\n{out}");
    wait_for(Duration::from_secs(10), "a resume counted", || {
        (total(&c, "lineage_resumes_total", &[]) >= 1.0).then_some(())
    });

    // A drain is counted with its duration by the node that ran it.
    let (code, out, err) = c.cli(&["--json", "drain", &root]);
    assert_eq!(code, 0, "drain failed: {err}\n{out}");
    assert!(total(&c, "lineage_drains_total", &[]) >= 1.0);
    assert!(total(&c, "lineage_drain_duration_seconds_count", &[]) >= 1.0);
    wait_for(Duration::from_secs(10), "disposed sessions counted", || {
        let m = metrics(&c, 2);
        (metric(&m, "lineage_sessions", &[("state", "disposed")]).unwrap_or(0.0) >= 2.0)
            .then_some(())
    });
    // Every control span of the drain's trace is exported too (drain, stop/release on nodes).
    wait_for(Duration::from_secs(20), "drain spans", || {
        jaeger
            .search("lineage", "drain")
            .iter()
            .flat_map(|t| t.spans())
            .any(|s| s.name == "drain" && s.text("session").as_deref() == Some(root.as_str()))
            .then_some(())
    });
}

/// G3, issue 35: how often a voter snapshots is the node's `registry.snapshot_after_commands`
/// (here through its environment variable): a few births past it build one, where the default
/// (20,000 commands) would build none.
#[test]
fn g3_a_voter_snapshots_after_the_commands_its_config_names() {
    let c = Cluster::start_with_env(1, &[("LINEAGE_REGISTRY__SNAPSHOT_AFTER_COMMANDS", "20")]);
    let built = |c: &Cluster| {
        metric(
            &metrics(c, 0),
            "lineage_registry_snapshots_built_total",
            &[],
        )
    };
    let before = built(&c).unwrap_or(0.0);
    let script = serde_json::json!({"turns": [[{"do": "reply", "content": "hi"}]]});
    for _ in 0..12 {
        c.spawn_root("node-1", &script);
    }
    let after = lineage_testkit::prelude::wait_for(
        std::time::Duration::from_secs(30),
        "a snapshot built after 20 commands",
        || built(&c).filter(|n| *n > before),
    );
    assert!(after >= 1.0, "{after}");
}
