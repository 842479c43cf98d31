//! Observability of the host (O2): operation spans carrying the W3C trace context, and the
//! counters behind the node's `/metrics`.
//!
//! # Spans
//!
//! Every lifecycle operation runs inside one `info` span named after it: `spawn`, `start` (the
//! hosting node's half of a spawn), `settle`, `resume`, `drain`, `stop`, `release`, `report`,
//! `followup`, `interrupt`, `invoke_agent` (a turn, see [`genai`]) and `inbox` (a delivery
//! from the durable inbox). Each has the
//! same fields, recorded when known: `node`, `session`, `run`, `parent`, `shape`,
//! `stop_reason`, `error` (also the exported span's error status), and `trace_id` (for the
//! logs).
//!
//! The context of an operation is a child of the one it was started from: the `traceparent` of
//! the control request or inbox message that started it (extracted by the service and the
//! inbox consumer), or the enclosing operation on this node (`lineage_bus::trace::current`),
//! or, failing both, a new trace ([`lineage_bus::trace::open_span`]: with the node's
//! OpenTelemetry layer the exported span's own ids). While the operation runs its context is
//! the task's current one, so the control requests, inbox publishes and lifecycle events it
//! sends carry it on.
//!
//! # Metrics
//!
//! [`HostMetrics`]: plain atomic counters, incremented where things happen; the node renders a
//! [`HostMetricsSnapshot`] in Prometheus text.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use lineage_bus::trace::TraceContext;
use lineage_core::descriptor::SubagentShape;
use lineage_core::messages::StopReason;
use tracing::Instrument;

use crate::error::HostError;

/// An operation's trace context and span.
pub(crate) struct Op {
    pub(crate) ctx: TraceContext,
    pub(crate) span: tracing::Span,
}

/// `op_span!("name", node)` or `op_span!("name", node, parent_ctx_option)`, optionally followed
/// by `; extra = field, ...`: an [`Op`] whose span carries the common fields (see the module
/// documentation), opened by [`lineage_bus::trace::open_span`].
macro_rules! op_span {
    ($name:literal, $node:expr) => {
        $crate::telemetry::op_span!($name, $node, None)
    };
    ($name:literal, $node:expr, $parent:expr $(; $($extra:tt)+)?) => {{
        let span = tracing::info_span!(
            $name,
            node = %$node,
            session = tracing::field::Empty,
            run = tracing::field::Empty,
            parent = tracing::field::Empty,
            shape = tracing::field::Empty,
            stop_reason = tracing::field::Empty,
            error = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
            trace_id = tracing::field::Empty,
            $($($extra)+)?
        );
        let (ctx, _) = lineage_bus::trace::open_span(&span, $parent);
        span.record("trace_id", ctx.trace_id_hex().as_str());
        $crate::telemetry::Op { ctx, span }
    }};
}
pub(crate) use op_span;

impl Op {
    /// Records a field on the span (display form).
    pub(crate) fn record(&self, field: &'static str, value: impl std::fmt::Display) -> &Self {
        self.span.record(field, tracing::field::display(value));
        self
    }

    /// Records why the operation failed: its `error` field and the exported span's status.
    pub(crate) fn fail(&self, error: impl std::fmt::Display) -> &Self {
        let error = error.to_string();
        self.record("error", &error)
            .record("otel.status_description", &error)
    }

    /// Records a field when there is a value.
    pub(crate) fn record_opt(
        &self,
        field: &'static str,
        value: Option<impl std::fmt::Display>,
    ) -> &Self {
        if let Some(v) = value {
            self.record(field, v);
        }
        self
    }

    /// Runs `fut` inside the span with this operation's context current. The future is boxed:
    /// operation futures nest (a spawn starts a turn that spawns ...) and would otherwise grow
    /// every enclosing future, and the stack frames polling them.
    pub(crate) async fn enter<F: Future>(&self, fut: F) -> F::Output {
        lineage_bus::trace::scope(self.ctx, Box::pin(fut))
            .instrument(self.span.clone())
            .await
    }

    /// [`Op::enter`] for a fallible operation: an error is recorded as the span's `error`.
    pub(crate) async fn run<T, F>(&self, fut: F) -> Result<T, HostError>
    where
        F: Future<Output = Result<T, HostError>>,
    {
        let out = self.enter(fut).await;
        if let Err(e) = &out {
            self.fail(e);
        }
        out
    }
}

/// The OpenTelemetry GenAI semantic conventions a turn's span follows (agent spans,
/// "Semantic Conventions for GenAI agent and framework spans"), pinned at
/// [`genai::SEMCONV_VERSION`]. They are experimental upstream: a newer version may rename an
/// attribute, and lineage moves when it pins the newer one.
///
/// A turn is one `invoke_agent` span (kind internal: the agent runs on this node), named
/// `invoke_agent <agent>`, with
/// - `gen_ai.operation.name` = `invoke_agent`;
/// - `gen_ai.agent.name` = the agent's profile (or `script`, `acp` for agents given inline);
/// - `gen_ai.conversation.id` = the session;
/// - `gen_ai.usage.input_tokens` = the tokens in the agent's context at the turn's end, when
///   it reported usage (ACP's `usage_update` reports the context it holds, which is what its
///   model read last; output tokens are not reported, so they are not set);
/// - `lineage.context_window`: the context window's size, when reported.
///
/// A child's spans hang under the span of the turn that spawned it: its `spawn` runs inside
/// that turn, its `start` continues the spawn's `traceparent`, its turns the start's.
pub mod genai {
    /// The semantic conventions version followed (the `opentelemetry-semantic-conventions`
    /// crate's `SCHEMA_URL` names the same).
    pub const SEMCONV_VERSION: &str = "1.42.0";
    /// `gen_ai.operation.name` of a turn.
    pub const INVOKE_AGENT: &str = "invoke_agent";
    /// The attributes a turn's span sets, by their names in the conventions.
    pub const ATTRIBUTES: [&str; 4] = [
        "gen_ai.operation.name",
        "gen_ai.agent.name",
        "gen_ai.conversation.id",
        "gen_ai.usage.input_tokens",
    ];

    /// The span's name: `invoke_agent <agent>`.
    pub fn span_name(agent: &str) -> String {
        format!("{INVOKE_AGENT} {agent}")
    }
}

const STOP_REASONS: [StopReason; 8] = StopReason::ALL;

/// Counters of one host, incremented where things happen. All relaxed atomics: they never
/// block or fail the operation they count.
#[derive(Debug, Default)]
pub struct HostMetrics {
    spawns_top_level: AtomicU64,
    spawns_continuable: AtomicU64,
    spawns_one_shot: AtomicU64,
    settlements: [AtomicU64; STOP_REASONS.len()],
    resumes: AtomicU64,
    reports: AtomicU64,
    inbox_publish_failures: AtomicU64,
    inbox_accepted: AtomicU64,
    inbox_duplicates: AtomicU64,
    inbox_lag: Latencies,
    inbox_lag_ms_max: AtomicU64,
    drains: AtomicU64,
    drain_failures: AtomicU64,
    drain_duration: Latencies,
    turn_duration: Latencies,
    spawn_duration: Latencies,
    registry_write_duration: Latencies,
    settlement_duration: Latencies,
    refusals: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
    cost_micros: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

/// Upper bounds of the latency histograms' buckets, in ms (an observation past the last is
/// counted only in `+Inf`).
pub const LATENCY_BOUNDS_MS: [u64; 13] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000,
];

/// A latency histogram: observations by bucket, their count and their sum.
#[derive(Debug, Default)]
struct Latencies {
    buckets: [AtomicU64; LATENCY_BOUNDS_MS.len()],
    count: AtomicU64,
    sum_ms: AtomicU64,
}

impl Latencies {
    fn observe(&self, ms: u64) {
        if let Some(i) = LATENCY_BOUNDS_MS.iter().position(|b| ms <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ms.fetch_add(ms, Ordering::Relaxed);
    }

    fn snapshot(&self) -> LatencyHistogram {
        LatencyHistogram {
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            count: self.count.load(Ordering::Relaxed),
            sum_ms: self.sum_ms.load(Ordering::Relaxed),
        }
    }
}

/// A point-in-time copy of a latency histogram ([`LATENCY_BOUNDS_MS`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LatencyHistogram {
    /// Observations in each bucket (not cumulative), one per bound.
    pub buckets: Vec<u64>,
    /// Observations in all.
    pub count: u64,
    /// Their sum, in ms.
    pub sum_ms: u64,
}

impl LatencyHistogram {
    /// The sum, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ms as f64 / 1000.0
    }

    /// `(upper bound in seconds, observations in that bucket)` for each bound, then
    /// `(f64::MAX, past the last bound)`: `+Inf` (what `prometheus-client` encodes).
    pub fn buckets_seconds(&self) -> Vec<(f64, u64)> {
        let mut out: Vec<(f64, u64)> = LATENCY_BOUNDS_MS
            .iter()
            .zip(&self.buckets)
            .map(|(b, n)| (*b as f64 / 1000.0, *n))
            .collect();
        let counted: u64 = self.buckets.iter().sum();
        out.push((f64::MAX, self.count.saturating_sub(counted)));
        out
    }
}

/// A point-in-time copy of [`HostMetrics`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostMetricsSnapshot {
    /// Sessions registered by this node, by shape: `top-level`, `continuable`, `one-shot`.
    pub spawns: Vec<(&'static str, u64)>,
    /// Settlements committed by this node, by stop reason (every reason listed).
    pub settlements: Vec<(&'static str, u64)>,
    /// Cold resumes done here.
    pub resumes: u64,
    /// Reports published to a parent inbox.
    pub reports: u64,
    /// Inbox publishes (reports, settlement notices) still not done when the host shut down
    /// (they are retried until then).
    pub inbox_publish_failures: u64,
    /// Inbox messages (reports, settlement notices) accepted into a live parent's log.
    pub inbox_accepted: u64,
    /// Inbox messages skipped because the parent's log already held them (exactly once).
    pub inbox_duplicates: u64,
    /// `accepted_at - message.at_ms` over accepted inbox messages.
    pub inbox_lag: LatencyHistogram,
    /// The largest such lag, in ms.
    pub inbox_lag_ms_max: u64,
    /// Drains coordinated here that completed.
    pub drains: u64,
    /// Drains coordinated here that failed.
    pub drain_failures: u64,
    /// Durations of the completed drains.
    pub drain_duration: LatencyHistogram,
    /// Durations of the turns taken here, however they ended.
    pub turn_duration: LatencyHistogram,
    /// Durations of the spawns of top-level and continuable sessions answered here, from the
    /// request to the new session live (a one-shot spawn's reply waits for its whole run, so
    /// it is not counted).
    pub spawn_duration: LatencyHistogram,
    /// Durations of this node's registry writes, once per try (from the request to the answer).
    pub registry_write_duration: LatencyHistogram,
    /// Durations of the settlements committed here (log flush and registry write).
    pub settlement_duration: LatencyHistogram,
    /// Spawns refused here, by reason (the rule's name, e.g. `depth_exceeded`), sorted.
    pub refusals: Vec<(&'static str, u64)>,
    /// Cost the agents of this node reported, in millionths, by currency, sorted.
    pub cost_micros: Vec<(String, u64)>,
}

impl HostMetrics {
    pub(crate) fn spawned(&self, shape: Option<SubagentShape>) {
        let c = match shape {
            None => &self.spawns_top_level,
            Some(SubagentShape::Continuable) => &self.spawns_continuable,
            Some(SubagentShape::OneShot) => &self.spawns_one_shot,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn settled(&self, stop: StopReason) {
        let i = STOP_REASONS.iter().position(|s| *s == stop);
        if let Some(c) = i.and_then(|i| self.settlements.get(i)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn resumed(&self) {
        self.resumes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn reported(&self) {
        self.reports.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn inbox_publish_failed(&self) {
        self.inbox_publish_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn inbox_accepted(&self, lag_ms: u64) {
        self.inbox_accepted.fetch_add(1, Ordering::Relaxed);
        self.inbox_lag.observe(lag_ms);
        self.inbox_lag_ms_max.fetch_max(lag_ms, Ordering::Relaxed);
    }

    pub(crate) fn inbox_duplicate(&self) {
        self.inbox_duplicates.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn drained(&self, ok: bool, ms: u64) {
        if ok {
            self.drains.fetch_add(1, Ordering::Relaxed);
            self.drain_duration.observe(ms);
        } else {
            self.drain_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn turned(&self, ms: u64) {
        self.turn_duration.observe(ms);
    }

    /// A spawn answered here after `ms`: its duration when it is live (a one-shot's reply
    /// waits for the whole run: not a spawn's duration), or its refusal's reason.
    pub(crate) fn spawn_outcome(
        &self,
        out: &Result<lineage_protocol::control::SpawnReply, crate::error::HostError>,
        ms: u64,
        shape: Option<SubagentShape>,
    ) {
        match (out, shape) {
            (Ok(_), Some(SubagentShape::OneShot)) => {}
            (Ok(_), None | Some(SubagentShape::Continuable)) => self.spawn_duration.observe(ms),
            (Err(e), _) => {
                if let Some(reason) = e.refusal_reason() {
                    self.refused(reason);
                }
            }
        }
    }

    pub(crate) fn registry_wrote(&self, ms: u64) {
        self.registry_write_duration.observe(ms);
    }

    pub(crate) fn settlement_took(&self, ms: u64) {
        self.settlement_duration.observe(ms);
    }

    /// A spawn refused for `reason` ([`crate::error::HostError::refusal_reason`]).
    pub(crate) fn refused(&self, reason: &'static str) {
        if let Ok(mut refusals) = self.refusals.lock() {
            *refusals.entry(reason).or_default() += 1;
        }
    }

    /// Cost an agent reported since its previous report, in millionths of `currency`.
    pub(crate) fn cost_added(&self, currency: &str, micros: u64) {
        if micros == 0 {
            return;
        }
        if let Ok(mut cost) = self.cost_micros.lock() {
            let sum = cost.entry(currency.to_owned()).or_default();
            *sum = sum.saturating_add(micros);
        }
    }

    /// The current values.
    pub fn snapshot(&self) -> HostMetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        HostMetricsSnapshot {
            spawns: vec![
                ("top-level", get(&self.spawns_top_level)),
                ("continuable", get(&self.spawns_continuable)),
                ("one-shot", get(&self.spawns_one_shot)),
            ],
            settlements: STOP_REASONS
                .iter()
                .zip(&self.settlements)
                .map(|(s, c)| (s.as_str(), get(c)))
                .collect(),
            resumes: get(&self.resumes),
            reports: get(&self.reports),
            inbox_publish_failures: get(&self.inbox_publish_failures),
            inbox_accepted: get(&self.inbox_accepted),
            inbox_duplicates: get(&self.inbox_duplicates),
            inbox_lag: self.inbox_lag.snapshot(),
            inbox_lag_ms_max: get(&self.inbox_lag_ms_max),
            drains: get(&self.drains),
            drain_failures: get(&self.drain_failures),
            drain_duration: self.drain_duration.snapshot(),
            turn_duration: self.turn_duration.snapshot(),
            spawn_duration: self.spawn_duration.snapshot(),
            registry_write_duration: self.registry_write_duration.snapshot(),
            settlement_duration: self.settlement_duration.snapshot(),
            refusals: self
                .refusals
                .lock()
                .map(|r| r.iter().map(|(k, v)| (*k, *v)).collect())
                .unwrap_or_default(),
            cost_micros: self
                .cost_micros
                .lock()
                .map(|c| c.iter().map(|(k, v)| (k.clone(), *v)).collect())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_land_in_the_snapshot() {
        let m = HostMetrics::default();
        m.spawned(Some(SubagentShape::OneShot));
        m.spawned(None);
        m.settled(StopReason::MaxTurns);
        m.inbox_accepted(5);
        m.inbox_accepted(40);
        m.drained(true, 12);
        m.drained(false, 99);
        m.refused("depth_exceeded");
        m.refused("depth_exceeded");
        m.refused("fan_out_exceeded");
        m.cost_added("USD", 1_500);
        m.cost_added("USD", 500);
        m.cost_added("credits", 0);
        m.registry_wrote(7);
        let s = m.snapshot();
        assert_eq!(
            s.refusals,
            vec![("depth_exceeded", 2), ("fan_out_exceeded", 1)]
        );
        assert_eq!(s.cost_micros, vec![("USD".to_owned(), 2_000)]);
        assert_eq!(
            (
                s.registry_write_duration.count,
                s.registry_write_duration.sum_ms
            ),
            (1, 7)
        );
        assert_eq!(
            s.spawns,
            vec![("top-level", 1), ("continuable", 0), ("one-shot", 1)]
        );
        assert_eq!(s.settlements.len(), STOP_REASONS.len());
        assert!(s.settlements.contains(&("max_turns", 1)));
        // Every stop reason has its counter (a new one once panicked the agent task here).
        for r in STOP_REASONS {
            m.settled(r);
        }
        assert!(m.snapshot().settlements.contains(&("deadline", 1)));
        assert_eq!(
            (s.inbox_accepted, s.inbox_lag.sum_ms, s.inbox_lag_ms_max),
            (2, 45, 40)
        );
        assert_eq!(
            (s.drains, s.drain_failures, s.drain_duration.sum_ms),
            (1, 1, 12)
        );
        // 5 ms in the first bucket (<= 5 ms), 40 ms in the fourth (<= 50 ms), none past.
        let buckets = s.inbox_lag.buckets_seconds();
        assert_eq!(buckets[0], (0.005, 1));
        assert_eq!(buckets[3], (0.05, 1));
        assert_eq!(buckets.last(), Some(&(f64::MAX, 0)));
        m.inbox_accepted(90_000);
        let past = m.snapshot().inbox_lag.buckets_seconds();
        assert_eq!(
            past.last(),
            Some(&(f64::MAX, 1)),
            "past the last bound: +Inf only"
        );
    }

    #[tokio::test]
    async fn an_operation_is_a_child_of_the_current_context() {
        let root = TraceContext::new_root();
        let op = lineage_bus::trace::scope(root, async { op_span!("spawn", "node-1") }).await;
        assert_eq!(op.ctx.trace_id, root.trace_id);
        assert_ne!(op.ctx.span_id, root.span_id);
        let inner = op
            .enter(async { lineage_bus::trace::current() })
            .await
            .expect("current inside");
        assert_eq!(inner, op.ctx);
        let fresh = op_span!("spawn", "node-1");
        assert_ne!(fresh.ctx.trace_id, root.trace_id);
        let explicit = op_span!("inbox", "node-1", Some(root); sender = "x");
        assert_eq!(explicit.ctx.trace_id, root.trace_id);
    }
}
