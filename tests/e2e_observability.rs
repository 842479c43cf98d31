//! End to end, observability (O2): three node processes export spans to an OTLP collector (a
//! TCP listener in this test) and serve `/metrics`, `/healthz`, `/readyz`.
//!
//! One CLI spawn (with a known `TRACEPARENT`) of a child on node-2 under a root on node-1 must
//! show up at the collector as spans from both nodes sharing that trace id, linked parent to
//! child across the NATS hop; the nodes' `/metrics` must count the spawn, the report, the
//! settlement, the inbox acceptances, a cold resume and a drain, and show the registry's
//! session counts and Raft state.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::{json, Value};

/// One exported span, with the node its resource names.
#[derive(Debug, Clone)]
struct Exported {
    node: String,
    span: Value,
}

impl Exported {
    fn attr(&self, key: &str) -> Option<String> {
        self.span["attributes"]
            .as_array()?
            .iter()
            .find(|a| a["key"] == key)
            .and_then(|a| a["value"]["stringValue"].as_str())
            .map(str::to_owned)
    }
}

/// A minimal OTLP/HTTP collector: answers every POST with 200 and keeps the spans. Checks the
/// request shape (path, content type) and the OTLP/JSON shape of every body as it arrives.
struct Collector {
    endpoint: String,
    spans: Arc<Mutex<Vec<Exported>>>,
    problems: Arc<Mutex<Vec<String>>>,
}

impl Collector {
    fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind collector");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let problems = Arc::new(Mutex::new(Vec::new()));
        let (s, p) = (spans.clone(), problems.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (s, p) = (s.clone(), p.clone());
                std::thread::spawn(move || serve(stream, &s, &p));
            }
        });
        Collector {
            endpoint,
            spans,
            problems,
        }
    }

    fn spans(&self) -> Vec<Exported> {
        let problems = self.problems.lock().unwrap().clone();
        assert!(problems.is_empty(), "bad OTLP requests: {problems:#?}");
        self.spans.lock().unwrap().clone()
    }
}

fn serve(
    mut stream: std::net::TcpStream,
    spans: &Mutex<Vec<Exported>>,
    problems: &Mutex<Vec<String>>,
) {
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let (head, body) = loop {
        let n = stream.read(&mut chunk).unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..at]).into_owned();
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        if buf.len() >= at + 4 + len {
            break (head, buf[at + 4..at + 4 + len].to_vec());
        }
    };
    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}");
    let bad = |why: String| problems.lock().unwrap().push(why);
    if !head.starts_with("POST /v1/traces HTTP/1.1") {
        bad(format!("request line: {head}"));
    }
    if !head
        .to_ascii_lowercase()
        .contains("content-type: application/json")
    {
        bad(format!("content type: {head}"));
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad(format!("body is not JSON: {e}")),
    };
    let Some(resource_spans) = body["resourceSpans"].as_array() else {
        return bad(format!("no resourceSpans: {body}"));
    };
    let is_hex = |v: &Value, len: usize| {
        v.as_str().is_some_and(|s| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    };
    let is_nanos = |v: &Value| {
        v.as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|n| n > 1_600_000_000_000_000_000)
    };
    for rs in resource_spans {
        let resource = rs["resource"]["attributes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let res = |k: &str| {
            resource
                .iter()
                .find(|a| a["key"] == k)
                .and_then(|a| a["value"]["stringValue"].as_str())
                .map(str::to_owned)
        };
        if res("service.name").as_deref() != Some("lineage") {
            bad(format!("service.name: {resource:?}"));
        }
        let node = res("lineage.node").unwrap_or_default();
        for ss in rs["scopeSpans"].as_array().cloned().unwrap_or_default() {
            for span in ss["spans"].as_array().cloned().unwrap_or_default() {
                let ok = is_hex(&span["traceId"], 32)
                    && is_hex(&span["spanId"], 16)
                    && (span.get("parentSpanId").is_none() || is_hex(&span["parentSpanId"], 16))
                    && span["name"].as_str().is_some_and(|n| !n.is_empty())
                    && is_nanos(&span["startTimeUnixNano"])
                    && is_nanos(&span["endTimeUnixNano"])
                    && span["attributes"].is_array();
                if !ok {
                    bad(format!("span shape: {span}"));
                }
                spans.lock().unwrap().push(Exported {
                    node: node.clone(),
                    span,
                });
            }
        }
    }
}

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
    let collector = Collector::start();
    let c = Cluster::start_with_env(
        3,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str())],
    );

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

    // The collector gets spans of that trace from node-1 and node-2 (export runs every second).
    let spans = wait_for(
        Duration::from_secs(20),
        "spans of the CLI's trace from node-1 (spawn, inbox), node-2 (start, turn, report, settle) and the registry leader (registry.write)",
        || {
            let mine: Vec<Exported> = collector
                .spans()
                .into_iter()
                .filter(|s| s.span["traceId"] == trace_id)
                .collect();
            let has = |node: &str, name: &str| {
                mine.iter().any(|s| s.node == node && s.span["name"] == name)
            };
            // The settlement notice's inbox span, not just any (the report's comes first, and
            // the two may be exported in different batches).
            let settle_ids: Vec<&Value> = mine
                .iter()
                .filter(|s| s.node == "node-2" && s.span["name"] == "settle")
                .map(|s| &s.span["spanId"])
                .collect();
            let notice_taken = mine.iter().any(|s| {
                s.node == "node-1"
                    && s.span["name"] == "inbox"
                    && settle_ids.contains(&&s.span["parentSpanId"])
            });
            let all = has("node-1", "spawn")
                && notice_taken
                && has("node-2", "start")
                && has("node-2", "turn")
                && has("node-2", "report")
                && has("node-2", "settle")
                && mine.iter().any(|s| s.span["name"] == "registry.write");
            all.then_some(mine)
        },
    );
    let nodes: BTreeSet<&str> = spans.iter().map(|s| s.node.as_str()).collect();
    assert!(
        nodes.contains("node-1") && nodes.contains("node-2"),
        "one trace over two nodes: {nodes:?}"
    );
    let find = |node: &str, name: &str| {
        spans
            .iter()
            .filter(|s| s.node == node && s.span["name"] == name)
            .cloned()
            .collect::<Vec<_>>()
    };
    // node-1's spawn (the parent lives there) names the child, its parent, the shape and the run.
    let spawn = find("node-1", "spawn")
        .into_iter()
        .find(|s| s.attr("session").as_deref() == Some(child.as_str()))
        .unwrap_or_else(|| panic!("no node-1 spawn span for {child}: {spans:#?}"));
    assert_eq!(spawn.attr("parent").as_deref(), Some(root.as_str()));
    assert_eq!(spawn.attr("shape").as_deref(), Some("continuable"));
    assert_eq!(spawn.attr("node").as_deref(), Some("node-1"));
    assert!(spawn.attr("run").is_some(), "{:?}", spawn.span);
    // The hop node-1 -> node-2 (per-node start request) keeps the parent link.
    let start = find("node-2", "start")
        .into_iter()
        .find(|s| s.attr("session").as_deref() == Some(child.as_str()))
        .expect("node-2 start span of the child");
    assert_eq!(
        start.span["parentSpanId"], spawn.span["spanId"],
        "{:?}",
        start.span
    );
    // The hosting node registered the birth with the registry leader (any node) in the same
    // trace: the member's `registry.write` span hangs under node-2's start span.
    let registry_writes: Vec<&Exported> = spans
        .iter()
        .filter(|s| s.span["name"] == "registry.write")
        .collect();
    assert!(
        registry_writes
            .iter()
            .any(|s| s.span["parentSpanId"] == start.span["spanId"]),
        "a registry.write span is a child of the start span: {registry_writes:#?}"
    );
    assert_eq!(start.attr("run"), spawn.attr("run"));
    // The settlement on node-2 and its notice accepted on node-1 stay in the trace.
    let settle = find("node-2", "settle");
    assert!(
        settle
            .iter()
            .any(|s| s.attr("session").as_deref() == Some(child.as_str())
                && s.attr("stop_reason").as_deref() == Some("completed")),
        "{settle:#?}"
    );
    let inbox = find("node-1", "inbox");
    let settle_ids: Vec<&Value> = settle.iter().map(|s| &s.span["spanId"]).collect();
    assert!(
        inbox
            .iter()
            .any(|s| s.attr("session").as_deref() == Some(root.as_str())
                && s.attr("sender").as_deref() == Some(child.as_str())
                && settle_ids.contains(&&s.span["parentSpanId"])),
        "the inbox span on node-1 is a child of the settle span on node-2: {inbox:#?}"
    );
    // The first span the CLI's request reached hangs under the caller's span.
    assert!(
        spans
            .iter()
            .any(|s| s.span["parentSpanId"] == caller_span && s.span["name"] == "spawn"),
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
        collector
            .spans()
            .iter()
            .any(|s| {
                s.span["name"] == "drain" && s.attr("session").as_deref() == Some(root.as_str())
            })
            .then_some(())
    });
}
