//! The exporter against a real TCP listener: what it sends, what it drops, what it counts.

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use tokio::net::TcpListener;
use tracing_subscriber::layer::SubscriberExt;

#[test]
fn endpoints_parse_http_only() {
    let e = Endpoint::parse("http://collector:4318/v1/traces").unwrap();
    assert_eq!(
        (e.host.as_str(), e.port, e.path.as_str()),
        ("collector", 4318, "/v1/traces")
    );
    let e = Endpoint::parse("http://[::1]:4318/v1/traces").unwrap();
    assert_eq!(
        (e.host.as_str(), e.authority.as_str()),
        ("::1", "[::1]:4318")
    );
    let e = Endpoint::parse("http://localhost").unwrap();
    assert_eq!((e.port, e.path.as_str()), (80, "/"));
    let https = Endpoint::parse("https://collector:4318/v1/traces").unwrap_err();
    assert!(https.contains("plain http only"), "{https}");
    for bad in [
        "collector:4318",
        "http://",
        "http://:4318/x",
        "http://h:port/x",
        "http://u@h/",
    ] {
        assert!(Endpoint::parse(bad).is_err(), "accepted {bad}");
    }
}

/// A one-shot collector: accepts connections, answers 200, returns each request's body.
async fn collector() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(String, Value)>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    let Some((head, body)) = text.split_once("\r\n\r\n") else {
                        continue;
                    };
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    if body.len() < len {
                        continue;
                    }
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                        .await;
                    let json = serde_json::from_str(body).unwrap_or(Value::Null);
                    let _ = tx.send((head.to_owned(), json));
                    return;
                }
            });
        }
    });
    (format!("http://{addr}/v1/traces"), rx)
}

#[tokio::test]
async fn a_span_arrives_at_the_collector_in_otlp_json_shape() {
    let (endpoint, mut bodies) = collector().await;
    let mut cfg = OtlpConfig::new(endpoint);
    cfg.resource.push(("lineage.node".into(), "node-7".into()));
    cfg.flush_every = Duration::from_millis(100);
    let (layer, handle) = start(cfg).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    {
        let _guard = tracing::subscriber::set_default(subscriber);
        let span = tracing::info_span!(
            "spawn",
            node = "node-7",
            session = tracing::field::Empty,
            depth = 2u64,
            trace_id = trace_id,
            span_id = "00f067aa0ba902b7",
            parent_span_id = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        span.record("parent_span_id", "1111111111111111");
        span.record("session", "0190f0f0-0000-7000-8000-000000000001");
        span.in_scope(|| {
            // A nested span without ids inherits the trace.
            let inner = tracing::info_span!("registry_write", ok = true);
            drop(inner);
        });
        drop(span);
        // A span outside any trace is not exported.
        drop(tracing::info_span!("unrelated"));
    }
    let (head, body) = tokio::time::timeout(Duration::from_secs(5), bodies.recv())
        .await
        .expect("a POST within 5 s")
        .unwrap();
    assert!(head.starts_with("POST /v1/traces HTTP/1.1"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    let rs = &body["resourceSpans"][0];
    let resource = rs["resource"]["attributes"].as_array().unwrap();
    let res = |k: &str| {
        resource
            .iter()
            .find(|a| a["key"] == k)
            .map(|a| a["value"]["stringValue"].clone())
    };
    assert_eq!(res("service.name"), Some(json!("lineage")));
    assert_eq!(res("lineage.node"), Some(json!("node-7")));
    let spans = rs["scopeSpans"][0]["spans"].as_array().unwrap();
    assert_eq!(spans.len(), 2, "{body}");
    let outer = spans.iter().find(|s| s["name"] == "spawn").unwrap();
    let inner = spans
        .iter()
        .find(|s| s["name"] == "registry_write")
        .unwrap();
    assert_eq!(outer["traceId"], trace_id);
    assert_eq!(outer["spanId"], "00f067aa0ba902b7");
    assert_eq!(outer["parentSpanId"], "1111111111111111");
    assert_eq!(outer["kind"], 1);
    let start: u64 = outer["startTimeUnixNano"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let end: u64 = outer["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
    assert!(start > 1_600_000_000_000_000_000 && end >= start);
    let attr = |s: &Value, k: &str| {
        s["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == k)
            .map(|a| a["value"].clone())
    };
    assert_eq!(attr(outer, "node"), Some(json!({"stringValue": "node-7"})));
    assert_eq!(
        attr(outer, "session"),
        Some(json!({"stringValue": "0190f0f0-0000-7000-8000-000000000001"}))
    );
    assert_eq!(attr(outer, "depth"), Some(json!({"intValue": "2"})));
    assert_eq!(attr(outer, "trace_id"), None, "ids are not attributes");
    assert_eq!(
        attr(outer, "error"),
        None,
        "unrecorded fields are not attributes"
    );
    assert!(outer.get("status").is_none());
    assert_eq!(inner["traceId"], trace_id);
    assert_eq!(inner["parentSpanId"], "00f067aa0ba902b7");
    assert_eq!(attr(inner, "ok"), Some(json!({"boolValue": true})));
    // Counted once the collector's answer is read.
    for _ in 0..100 {
        if handle.stats().exported == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(handle.stats().exported, 2);
    handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_full_queue_drops_the_oldest_and_a_dead_collector_is_counted() {
    // Nothing listens here (bound, then closed).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cfg = OtlpConfig::new(format!("http://127.0.0.1:{port}/v1/traces"));
    cfg.queue_max = 3;
    cfg.batch_max = 100;
    cfg.flush_every = Duration::from_secs(3600);
    let (layer, handle) = start(cfg).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        for i in 0..5u64 {
            let _s = tracing::info_span!(
                "turn",
                index = i,
                trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
            )
            .entered();
        }
    });
    assert_eq!(handle.stats().dropped, 2);
    handle.flush().await;
    let stats = handle.stats();
    assert_eq!((stats.exported, stats.failed), (0, 3), "{stats:?}");
    handle.shutdown(Duration::from_secs(1)).await;
}

#[test]
fn from_env_builds_the_traces_url() {
    // Only reads variables; the test does not set any (the process env is shared).
    if std::env::var(ENDPOINT_ENV).is_err() && std::env::var(TRACES_ENDPOINT_ENV).is_err() {
        assert!(OtlpConfig::from_env(Some("n")).is_none());
    }
}
