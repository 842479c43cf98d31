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
//!
//! | file | what |
//! |---|---|
//! | `otlp.rs` | the configuration, the layer (span records), the queue and its flushing task |
//! | `otlp/wire.rs` | the OTLP/JSON body of a batch and its HTTP/1.1 POST |
//! | `otlp/tests.rs` | against a real TCP listener |

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lineage_bus::trace::{decode_hex, new_span_id};

use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

#[cfg(test)]
mod tests;
mod wire;

use wire::{encode, post};

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
