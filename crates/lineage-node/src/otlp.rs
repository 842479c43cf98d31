//! A minimal OTLP/HTTP **JSON** trace exporter, as a `tracing_subscriber` layer (O2).
//!
//! Enabled when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended) is set. Only `http://` is supported:
//! an `https://` endpoint logs one warning and export stays off (put a collector or sidecar
//! on plain HTTP next to the node). `OTEL_SERVICE_NAME` overrides `service.name` (`lineage`).
//!
//! What is exported: every span that belongs to a trace. A span gets its identity from its
//! `trace_id`, `span_id` and `parent_span_id` fields when it has them (the host's operation
//! spans, see `lineage_host::telemetry`); a span without them inherits the trace of its
//! enclosing span and gets a fresh span id; a span with no trace at all is not exported. Its
//! other fields become attributes (strings, integers, booleans, floats); an `error` field
//! marks the span's status as an error. The resource carries `service.name`, `service.version`
//! and `lineage.node`.
//!
//! How: on span close the layer pushes a record into a bounded queue (when full, the oldest
//! record is dropped and counted); a tokio task flushes every second, or as soon as 512 spans
//! wait, as one `POST <endpoint>` with `Content-Type: application/json` and a body
//! `{"resourceSpans":[...]}`, over a plain HTTP/1.1 connection on a tokio `TcpStream`. The
//! traced code never blocks on export (a short mutex push) and never sees an export error;
//! failures are logged at most once a minute and counted ([`OtlpStats`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lineage_bus::trace::{decode_hex, hex, new_span_id};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The base endpoint variable (`/v1/traces` is appended).
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The traces endpoint variable (used as is; wins over [`ENDPOINT_ENV`]).
pub const TRACES_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// Overrides `service.name`.
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";

/// Exporter settings.
#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// Where to POST: `http://host:port/path`.
    pub endpoint: String,
    /// `service.name`.
    pub service_name: String,
    /// Other resource attributes (`lineage.node`, ...).
    pub resource: Vec<(String, String)>,
    /// Flush at least this often.
    pub flush_every: Duration,
    /// Flush as soon as this many spans wait; also the largest batch per POST.
    pub batch_max: usize,
    /// Queue bound: beyond it the oldest span is dropped.
    pub queue_max: usize,
    /// Deadline of one POST (connect, write, status line).
    pub request_timeout: Duration,
}

impl OtlpConfig {
    /// Defaults for `endpoint` (the full traces URL): 1 s, 512 spans, 4096 queued, 10 s.
    pub fn new(endpoint: impl Into<String>) -> Self {
        OtlpConfig {
            endpoint: endpoint.into(),
            service_name: "lineage".to_owned(),
            resource: Vec::new(),
            flush_every: Duration::from_secs(1),
            batch_max: 512,
            queue_max: 4096,
            request_timeout: Duration::from_secs(10),
        }
    }

    /// From the environment: `None` when no endpoint variable is set (export off).
    /// `lineage.node` is added when `node` is given.
    pub fn from_env(node: Option<&str>) -> Option<Self> {
        let non_empty = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let endpoint = match non_empty(TRACES_ENDPOINT_ENV) {
            Some(url) => url.trim().to_owned(),
            None => {
                let base = non_empty(ENDPOINT_ENV)?;
                format!("{}/v1/traces", base.trim().trim_end_matches('/'))
            }
        };
        let mut cfg = OtlpConfig::new(endpoint);
        if let Some(name) = non_empty(SERVICE_NAME_ENV) {
            cfg.service_name = name;
        }
        if let Some(node) = node {
            cfg.resource
                .push(("lineage.node".to_owned(), node.to_owned()));
        }
        Some(cfg)
    }
}

/// A parsed `http://` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    /// For `connect` (no brackets around an IPv6 address).
    host: String,
    port: u16,
    /// For the `Host` header.
    authority: String,
    path: String,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Self, String> {
        let rest = if let Some(rest) = url.strip_prefix("http://") {
            rest
        } else if url.starts_with("https://") {
            return Err(format!(
                "OTLP endpoint {url} uses https, but lineage's exporter speaks plain http only; \
                 trace export is disabled (point it at an http:// collector or a local sidecar)"
            ));
        } else {
            return Err(format!(
                "OTLP endpoint {url:?} is not an http:// URL; trace export is disabled"
            ));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let bad =
            || format!("OTLP endpoint {url:?} has no valid host[:port]; trace export is disabled");
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad())?,
                None if after.is_empty() => 80,
                None => return Err(bad()),
            };
            (h.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), p.parse().map_err(|_| bad())?),
                None => (authority.to_owned(), 80),
            }
        };
        if host.is_empty() || authority.contains('@') {
            return Err(bad());
        }
        Ok(Endpoint {
            host,
            port,
            authority: authority.to_owned(),
            path: path.to_owned(),
        })
    }
}

/// Export counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OtlpStats {
    /// Spans accepted by the collector.
    pub exported: u64,
    /// Spans dropped because the queue was full.
    pub dropped: u64,
    /// Spans lost in failed POSTs.
    pub failed: u64,
}

#[derive(Default)]
struct Counters {
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
}

impl Counters {
    fn get(&self) -> OtlpStats {
        OtlpStats {
            exported: self.exported.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

static GLOBAL: OnceLock<Arc<Counters>> = OnceLock::new();

/// The counters of the process's exporter, once one was registered with
/// [`OtlpHandle::register_global`].
pub fn global_stats() -> Option<OtlpStats> {
    GLOBAL.get().map(|c| c.get())
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
enum AttrValue {
    Str(String),
    Int(i64),
    Bool(bool),
    Double(f64),
}

/// A finished span, ready to encode.
#[derive(Debug, Clone)]
struct SpanRecord {
    name: &'static str,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent_span_id: Option<[u8; 8]>,
    start_ns: u64,
    end_ns: u64,
    attrs: Vec<(&'static str, AttrValue)>,
}

/// Per-span state, kept in the span's extensions.
struct SpanData {
    trace_id: Option<[u8; 16]>,
    span_id: [u8; 8],
    parent_span_id: Option<[u8; 8]>,
    start_ns: u64,
    attrs: Vec<(&'static str, AttrValue)>,
}

impl SpanData {
    fn apply(&mut self, fields: Fields) {
        if let Some(t) = fields.trace_id {
            self.trace_id = Some(t);
        }
        if let Some(s) = fields.span_id {
            self.span_id = s;
        }
        if let Some(p) = fields.parent_span_id {
            self.parent_span_id = Some(p);
        }
        for (k, v) in fields.attrs {
            match self.attrs.iter_mut().find(|(key, _)| *key == k) {
                Some(slot) => slot.1 = v,
                None => self.attrs.push((k, v)),
            }
        }
    }
}

/// Fields seen by one visit.
#[derive(Default)]
struct Fields {
    trace_id: Option<[u8; 16]>,
    span_id: Option<[u8; 8]>,
    parent_span_id: Option<[u8; 8]>,
    attrs: Vec<(&'static str, AttrValue)>,
}

impl Fields {
    fn text(&mut self, field: &Field, value: String) {
        match field.name() {
            "trace_id" => {
                if let Some(id) = decode_hex::<16>(&value).filter(|id| *id != [0; 16]) {
                    self.trace_id = Some(id);
                    return;
                }
            }
            "span_id" => {
                if let Some(id) = decode_hex::<8>(&value).filter(|id| *id != [0; 8]) {
                    self.span_id = Some(id);
                    return;
                }
            }
            "parent_span_id" => {
                if let Some(id) = decode_hex::<8>(&value).filter(|id| *id != [0; 8]) {
                    self.parent_span_id = Some(id);
                    return;
                }
            }
            _ => {}
        }
        self.attrs.push((field.name(), AttrValue::Str(value)));
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.text(field, format!("{value:?}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.attrs.push((field.name(), AttrValue::Int(value)));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let v = match i64::try_from(value) {
            Ok(i) => AttrValue::Int(i),
            Err(_) => AttrValue::Str(value.to_string()),
        };
        self.attrs.push((field.name(), v));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.attrs.push((field.name(), AttrValue::Bool(value)));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.attrs.push((field.name(), AttrValue::Double(value)));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.text(field, value.to_string());
    }
}

/// State shared by the layer and the export task.
struct Shared {
    cfg: OtlpConfig,
    endpoint: Endpoint,
    queue: Mutex<VecDeque<SpanRecord>>,
    wake: tokio::sync::Notify,
    counters: Arc<Counters>,
    last_error_log: Mutex<Option<Instant>>,
}

impl Shared {
    fn push(&self, record: SpanRecord) {
        let Ok(mut q) = self.queue.lock() else { return };
        if q.len() >= self.cfg.queue_max.max(1) {
            q.pop_front();
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(record);
        let full = q.len() >= self.cfg.batch_max.max(1);
        drop(q);
        if full {
            self.wake.notify_one();
        }
    }

    fn take_batch(&self) -> Vec<SpanRecord> {
        let Ok(mut q) = self.queue.lock() else {
            return Vec::new();
        };
        let n = q.len().min(self.cfg.batch_max.max(1));
        q.drain(..n).collect()
    }

    /// Logs an export problem, at most once a minute.
    fn complain(&self, what: &str) {
        let Ok(mut last) = self.last_error_log.lock() else {
            return;
        };
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
            return;
        }
        *last = Some(Instant::now());
        drop(last);
        tracing::warn!(
            endpoint = %self.cfg.endpoint,
            error = %what,
            "OTLP trace export failed (this warning repeats at most once a minute)"
        );
    }

    /// Sends everything queued, batch by batch.
    async fn flush(&self) {
        loop {
            let batch = self.take_batch();
            if batch.is_empty() {
                return;
            }
            let body = encode(&self.cfg, &batch);
            match post(&self.endpoint, &body, self.cfg.request_timeout).await {
                Ok(()) => {
                    self.counters
                        .exported
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    self.counters
                        .failed
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                    self.complain(&e);
                    // Do not hammer a dead collector: the rest waits for the next tick.
                    return;
                }
            }
        }
    }
}

/// The layer: install it with `tracing_subscriber::registry().with(layer)`.
#[derive(Clone)]
pub struct OtlpLayer {
    shared: Arc<Shared>,
}

/// Controls the export task.
pub struct OtlpHandle {
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for OtlpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpHandle")
            .field("endpoint", &self.shared.cfg.endpoint)
            .finish_non_exhaustive()
    }
}

impl OtlpHandle {
    /// Export counters so far.
    pub fn stats(&self) -> OtlpStats {
        self.shared.counters.get()
    }

    /// Makes these counters the ones [`global_stats`] reports (the first call wins).
    pub fn register_global(&self) {
        let _ = GLOBAL.set(self.shared.counters.clone());
    }

    /// Sends what is queued now.
    pub async fn flush(&self) {
        self.shared.flush().await;
    }

    /// Stops the export task after a last flush, waiting at most `limit`.
    pub async fn shutdown(mut self, limit: Duration) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(limit, task).await;
        }
    }
}

/// Builds the layer and starts its export task on the current tokio runtime. Fails (with one
/// line to log) on an endpoint that is not `http://host[:port][/path]`, or outside a runtime.
pub fn start(cfg: OtlpConfig) -> Result<(OtlpLayer, OtlpHandle), String> {
    let endpoint = Endpoint::parse(&cfg.endpoint)?;
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| "OTLP export needs a tokio runtime; trace export is disabled".to_owned())?;
    let shared = Arc::new(Shared {
        cfg,
        endpoint,
        queue: Mutex::new(VecDeque::new()),
        wake: tokio::sync::Notify::new(),
        counters: Arc::new(Counters::default()),
        last_error_log: Mutex::new(None),
    });
    let stop = CancellationToken::new();
    let task = {
        let shared = shared.clone();
        let stop = stop.clone();
        runtime.spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(shared.cfg.flush_every) => {}
                    _ = shared.wake.notified() => {}
                }
                shared.flush().await;
            }
            shared.flush().await;
        })
    };
    Ok((
        OtlpLayer {
            shared: shared.clone(),
        },
        OtlpHandle {
            shared,
            stop,
            task: Some(task),
        },
    ))
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl<S> Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        // Without its own trace id, a span continues its enclosing span's trace.
        let inherited = if fields.trace_id.is_none() {
            span.parent().and_then(|p| {
                p.extensions()
                    .get::<SpanData>()
                    .and_then(|d| d.trace_id.map(|t| (t, d.span_id)))
            })
        } else {
            None
        };
        let mut data = SpanData {
            trace_id: inherited.map(|(t, _)| t),
            span_id: new_span_id(),
            parent_span_id: inherited.map(|(_, s)| s),
            start_ns: now_ns(),
            attrs: Vec::new(),
        };
        data.apply(fields);
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        let mut ext = span.extensions_mut();
        if let Some(data) = ext.get_mut::<SpanData>() {
            data.apply(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let removed = span.extensions_mut().remove::<SpanData>();
        let Some(data) = removed else {
            return;
        };
        let Some(trace_id) = data.trace_id else {
            return;
        };
        self.shared.push(SpanRecord {
            name: span.name(),
            trace_id,
            span_id: data.span_id,
            parent_span_id: data.parent_span_id,
            start_ns: data.start_ns,
            end_ns: now_ns(),
            attrs: data.attrs,
        });
    }
}

fn attr_json(key: &str, value: &AttrValue) -> Value {
    let v = match value {
        AttrValue::Str(s) => json!({ "stringValue": s }),
        AttrValue::Int(i) => json!({ "intValue": i.to_string() }),
        AttrValue::Bool(b) => json!({ "boolValue": b }),
        AttrValue::Double(d) if d.is_finite() => json!({ "doubleValue": d }),
        AttrValue::Double(d) => json!({ "stringValue": d.to_string() }),
    };
    json!({ "key": key, "value": v })
}

/// The OTLP/JSON body for one batch.
fn encode(cfg: &OtlpConfig, spans: &[SpanRecord]) -> Vec<u8> {
    let mut resource = vec![
        attr_json("service.name", &AttrValue::Str(cfg.service_name.clone())),
        attr_json(
            "service.version",
            &AttrValue::Str(env!("CARGO_PKG_VERSION").to_owned()),
        ),
    ];
    resource.extend(
        cfg.resource
            .iter()
            .map(|(k, v)| attr_json(k, &AttrValue::Str(v.clone()))),
    );
    let spans: Vec<Value> = spans
        .iter()
        .map(|s| {
            let mut span = json!({
                "traceId": hex(&s.trace_id),
                "spanId": hex(&s.span_id),
                "name": s.name,
                "kind": 1,
                "startTimeUnixNano": s.start_ns.to_string(),
                "endTimeUnixNano": s.end_ns.max(s.start_ns).to_string(),
                "attributes": s.attrs.iter().map(|(k, v)| attr_json(k, v)).collect::<Vec<_>>(),
            });
            if let Some(p) = s.parent_span_id {
                span["parentSpanId"] = json!(hex(&p));
            }
            if let Some((_, AttrValue::Str(message))) = s.attrs.iter().find(|(k, _)| *k == "error")
            {
                span["status"] = json!({ "code": 2, "message": message });
            }
            span
        })
        .collect();
    let body = json!({
        "resourceSpans": [{
            "resource": { "attributes": resource },
            "scopeSpans": [{
                "scope": { "name": "lineage", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans,
            }],
        }],
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// One HTTP/1.1 POST; `Ok` on a 2xx status.
async fn post(endpoint: &Endpoint, body: &[u8], limit: Duration) -> Result<(), String> {
    let exchange = async {
        let mut stream = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", endpoint.authority))?;
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nUser-Agent: lineage/{}\r\nConnection: close\r\n\r\n",
            endpoint.path,
            endpoint.authority,
            body.len(),
            env!("CARGO_PKG_VERSION"),
        );
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| format!("cannot send to {}: {e}", endpoint.authority))?;
        stream
            .write_all(body)
            .await
            .map_err(|e| format!("cannot send to {}: {e}", endpoint.authority))?;
        stream
            .flush()
            .await
            .map_err(|e| format!("cannot send to {}: {e}", endpoint.authority))?;
        let mut buf = Vec::with_capacity(256);
        let mut chunk = [0u8; 512];
        while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 8192 {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("no answer from {}: {e}", endpoint.authority))?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&buf);
        let status_line = text.lines().next().unwrap_or("").trim().to_owned();
        let code: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("{} answered {status_line:?}, not HTTP", endpoint.authority))?;
        if (200..300).contains(&code) {
            Ok(())
        } else {
            Err(format!("collector answered {status_line:?}"))
        }
    };
    tokio::time::timeout(limit, exchange)
        .await
        .map_err(|_| format!("no answer from {} within {limit:?}", endpoint.authority))?
}

#[cfg(test)]
mod tests {
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
}
