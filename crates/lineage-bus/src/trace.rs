//! W3C trace context (O2): the `traceparent` header that carries one trace across nodes.
//!
//! Format (version `00` only): `00-<trace id: 32 lowercase hex>-<parent span id: 16 lowercase
//! hex>-<flags: 2 lowercase hex>`; bit 0 of the flags is "sampled". Parsing is strict: anything
//! else, and an all-zero trace or span id, is refused (the receiver then starts a new trace).
//!
//! Lineage puts it on control requests (`lineage.<cluster>.ctl.*`, `.node.<node>.*`), on parent
//! inbox publishes (reports, settlements) and on lifecycle events. Inside a process the context
//! of the operation being served travels in a tokio task-local ([`scope`], [`current`]):
//! [`crate::control::request`] and the host's publishes read it, so a request sent while serving
//! another carries the same trace id.
//!
//! # Spans
//!
//! An operation's span gets its identity from [`open_span`]: when the process exports traces
//! (an OpenTelemetry layer from `tracing-opentelemetry` is installed and the span is enabled
//! for it), the span continues its parent context and its OpenTelemetry span context (ids and
//! the sampler's decision) becomes the operation's [`TraceContext`], so what the operation
//! sends on names the exported span. Without a layer the context is made here, so the trace id
//! still travels (and logs correlate) where nothing is exported.
//!
//! Ids made here come from std hashing (a per-process random `RandomState` over the time, a
//! counter and the thread), not from a random number crate.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header name.
pub const TRACEPARENT: &str = "traceparent";

/// One point in a trace: the trace, the span that is the parent of whatever comes next, and
/// whether the trace is sampled.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// 16 bytes, never all zero.
    pub trace_id: [u8; 16],
    /// 8 bytes, never all zero.
    pub span_id: [u8; 8],
    /// Flag bit 0.
    pub sampled: bool,
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent())
    }
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent())
    }
}

/// Why a `traceparent` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid traceparent {value:?}: {reason}")]
pub struct TraceparentError {
    /// The value (truncated to 64 characters).
    pub value: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl TraceContext {
    /// A new trace (fresh trace id and span id), sampled.
    pub fn new_root() -> Self {
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&nonzero_random().to_be_bytes());
        trace_id[8..].copy_from_slice(&nonzero_random().to_be_bytes());
        TraceContext {
            trace_id,
            span_id: new_span_id(),
            sampled: true,
        }
    }

    /// The same trace with a new span id: the context of a span whose parent is `self`.
    pub fn child(&self) -> Self {
        TraceContext {
            trace_id: self.trace_id,
            span_id: new_span_id(),
            sampled: self.sampled,
        }
    }

    /// The `traceparent` header value.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{}",
            self.trace_id_hex(),
            self.span_id_hex(),
            if self.sampled { "01" } else { "00" }
        )
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The span id as 16 lowercase hex digits.
    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }

    /// Parses a `traceparent` value strictly (see the module documentation).
    pub fn parse(value: &str) -> Result<Self, TraceparentError> {
        let refuse = |reason| TraceparentError {
            value: value.chars().take(64).collect(),
            reason,
        };
        let bytes = value.as_bytes();
        if !value.is_ascii() {
            return Err(refuse("not ASCII"));
        }
        if bytes.len() != 55 {
            return Err(refuse(
                "expected 55 characters: 00-<32 hex>-<16 hex>-<2 hex>",
            ));
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return Err(refuse(
                "expected dashes after the version, trace id and span id",
            ));
        }
        let version: [u8; 1] = decode_hex(&value[0..2]).ok_or_else(|| refuse("bad version"))?;
        if version[0] != 0 {
            return Err(refuse("only version 00 is supported"));
        }
        let trace_id: [u8; 16] = decode_hex(&value[3..35])
            .ok_or_else(|| refuse("the trace id is not 32 lowercase hex digits"))?;
        let span_id: [u8; 8] = decode_hex(&value[36..52])
            .ok_or_else(|| refuse("the span id is not 16 lowercase hex digits"))?;
        let flags: [u8; 1] = decode_hex(&value[53..55])
            .ok_or_else(|| refuse("the flags are not 2 lowercase hex digits"))?;
        if trace_id == [0; 16] {
            return Err(refuse("the trace id is all zero"));
        }
        if span_id == [0; 8] {
            return Err(refuse("the span id is all zero"));
        }
        Ok(TraceContext {
            trace_id,
            span_id,
            sampled: flags[0] & 1 == 1,
        })
    }

    /// The context carried in `headers`, if there is a valid one.
    pub fn from_headers(headers: Option<&async_nats::HeaderMap>) -> Option<Self> {
        let value = headers?.get(TRACEPARENT)?;
        match Self::parse(value.as_str()) {
            Ok(ctx) => Some(ctx),
            Err(e) => {
                tracing::debug!(error = %e, "ignoring an invalid traceparent header");
                None
            }
        }
    }

    /// Sets the `traceparent` header.
    pub fn inject(&self, headers: &mut async_nats::HeaderMap) {
        headers.insert(TRACEPARENT, self.traceparent().as_str());
    }
}

impl TraceContext {
    /// As an OpenTelemetry span context from elsewhere (a parent).
    pub fn to_otel(&self) -> SpanContext {
        let flags = if self.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanContext::new(
            TraceId::from_bytes(self.trace_id),
            SpanId::from_bytes(self.span_id),
            flags,
            true,
            TraceState::default(),
        )
    }

    /// From an OpenTelemetry span context; `None` when it is not valid (all-zero ids).
    pub fn from_otel(ctx: &SpanContext) -> Option<Self> {
        ctx.is_valid().then(|| TraceContext {
            trace_id: ctx.trace_id().to_bytes(),
            span_id: ctx.span_id().to_bytes(),
            sampled: ctx.is_sampled(),
        })
    }
}

/// Opens an operation on `span`, a span just created: it continues `parent`, or the task's
/// [`current`] context, or starts a trace. Returns (the operation's context, its parent).
///
/// With an OpenTelemetry layer the span takes the parent (`set_parent`) and the operation's
/// context is the span's own (its ids, and sampled as the sampler decided); without one, or
/// when the layer's filter left the span out, it is a child of the parent made here.
pub fn open_span(
    span: &tracing::Span,
    parent: Option<TraceContext>,
) -> (TraceContext, Option<TraceContext>) {
    let parent = parent.or_else(current);
    if let Some(p) = parent {
        // Refused only when no layer records this span: then the fallback below applies.
        let _ =
            span.set_parent(opentelemetry::Context::new().with_remote_span_context(p.to_otel()));
    }
    let exported = TraceContext::from_otel(span.context().span().span_context());
    let ctx = exported.unwrap_or_else(|| match parent {
        Some(p) => p.child(),
        None => TraceContext::new_root(),
    });
    (ctx, parent)
}

tokio::task_local! {
    static CURRENT: TraceContext;
}

/// The trace context of the operation this task is serving, if any.
pub fn current() -> Option<TraceContext> {
    CURRENT.try_with(|c| *c).ok()
}

/// Runs `fut` with `ctx` as the [`current`] trace context (nested scopes override).
pub async fn scope<F: Future>(ctx: TraceContext, fut: F) -> F::Output {
    CURRENT.scope(ctx, fut).await
}

/// Runs `fut` with `ctx` as the current context when there is one, as is otherwise.
pub async fn maybe_scope<F: Future>(ctx: Option<TraceContext>, fut: F) -> F::Output {
    match ctx {
        Some(ctx) => CURRENT.scope(ctx, fut).await,
        None => fut.await,
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// Decodes exactly `N` bytes of lowercase hex.
fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != N * 2 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

/// A fresh, non-zero span id.
fn new_span_id() -> [u8; 8] {
    nonzero_random().to_be_bytes()
}

fn nonzero_random() -> u64 {
    static SEED: OnceLock<RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = SEED.get_or_init(RandomState::new);
    loop {
        let mut h = seed.build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        h.write_u128(nanos);
        h.write_u64(u64::from(std::process::id()));
        let v = h.finish();
        if v != 0 {
            return v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_and_formats_the_w3c_example() {
        let ctx = TraceContext::parse(GOOD).unwrap();
        assert_eq!(ctx.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.span_id_hex(), "00f067aa0ba902b7");
        assert!(ctx.sampled);
        assert_eq!(ctx.traceparent(), GOOD);
        let unsampled = TraceContext::parse(&GOOD.replace("-01", "-00")).unwrap();
        assert!(!unsampled.sampled);
        assert!(unsampled.traceparent().ends_with("-00"));
        // Unknown flag bits are accepted; only "sampled" is kept.
        assert!(
            TraceContext::parse(&GOOD.replace("-01", "-03"))
                .unwrap()
                .sampled
        );
    }

    #[test]
    fn refuses_everything_else() {
        let bad = [
            "",
            "00",
            &GOOD[..54],
            &format!("{GOOD}0"),
            &format!("{GOOD}-extra"),
            &GOOD.replace("00-4bf", "01-4bf"),
            &GOOD.replace("00-4bf", "ff-4bf"),
            &GOOD.to_uppercase(),
            &GOOD.replace("4bf92f", "4BF92F"),
            &GOOD.replace("4bf92f", "4bg92f"),
            &GOOD.replace("-00f067", "_00f067"),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-\u{e9}",
            "0\u{e9}4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ];
        for value in bad {
            assert!(TraceContext::parse(value).is_err(), "accepted {value:?}");
        }
    }

    #[test]
    fn child_keeps_the_trace_and_changes_the_span() {
        let root = TraceContext::new_root();
        assert_ne!(root.trace_id, [0; 16]);
        assert_ne!(root.span_id, [0; 8]);
        let child = root.child();
        assert_eq!(child.trace_id, root.trace_id);
        assert_ne!(child.span_id, root.span_id);
        assert_eq!(child.sampled, root.sampled);
        assert_eq!(TraceContext::parse(&child.traceparent()).unwrap(), child);
        let other = TraceContext::new_root();
        assert_ne!(other.trace_id, root.trace_id);
    }

    #[test]
    fn headers_round_trip_and_ignore_garbage() {
        let ctx = TraceContext::new_root();
        let mut headers = async_nats::HeaderMap::new();
        ctx.inject(&mut headers);
        assert_eq!(TraceContext::from_headers(Some(&headers)), Some(ctx));
        let mut junk = async_nats::HeaderMap::new();
        junk.insert(TRACEPARENT, "nope");
        assert_eq!(TraceContext::from_headers(Some(&junk)), None);
        assert_eq!(TraceContext::from_headers(None), None);
    }

    #[tokio::test]
    async fn the_task_local_scope_nests() {
        assert_eq!(current(), None);
        let a = TraceContext::new_root();
        let b = a.child();
        scope(a, async move {
            assert_eq!(current(), Some(a));
            scope(b, async move { assert_eq!(current(), Some(b)) }).await;
            assert_eq!(current(), Some(a));
        })
        .await;
        assert_eq!(current(), None);
    }
}
