//! Openraft's expected RPC failures, counted instead of logged as errors (issue 37).
//!
//! A leader whose append to a member takes longer than the heartbeat interval logs
//! `ERROR RPCError err=timeout ...` (openraft 0.9, `openraft::replication`) and retries at the
//! next heartbeat; a member that asks for votes while the others are still starting logs
//! `ERROR while requesting vote error=Unreachable ...` and asks again. On a busy machine, or at
//! start, that is routine (a quiet dev cluster logged 115 such lines in 20 minutes), and an
//! operator learns to ignore ERROR. [`RaftTimeouts`] is a per-layer filter for the log layer:
//! it drops exactly those events (openraft's target, level ERROR, an `err` or `error` field
//! that says timeout, timed out, unreachable or no responders) and counts them; `/metrics` shows the count as
//! `lineage_raft_rpc_unanswered_total`. Every other openraft event passes as it was (a
//! storage error, a refused vote).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata};
use tracing_subscriber::layer::{Context, Filter};

static TIMEOUTS: AtomicU64 = AtomicU64::new(0);

/// Unanswered Raft RPCs dropped from the logs since start.
pub fn unanswered_rpcs() -> u64 {
    TIMEOUTS.load(Ordering::Relaxed)
}

/// The filter; see the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct RaftTimeouts;

/// Finds an `err` or `error` field that says timeout (`timed out`), unreachable or no
/// responders.
#[derive(Default)]
struct UnansweredField(bool);

impl UnansweredField {
    fn check(&mut self, field: &Field, text: &str) {
        if matches!(field.name(), "err" | "error") {
            let text = text.to_ascii_lowercase();
            self.0 |= ["timeout", "timed out", "unreachable", "no responders"]
                .iter()
                .any(|says| text.contains(says));
        }
    }
}

impl Visit for UnansweredField {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.check(field, &format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.check(field, value);
    }
}

/// Whether `event` is one of openraft's unanswered RPCs.
fn is_unanswered(event: &Event<'_>) -> bool {
    let meta = event.metadata();
    if *meta.level() != Level::ERROR || !meta.target().starts_with("openraft") {
        return false;
    }
    let mut found = UnansweredField::default();
    event.record(&mut found);
    found.0
}

impl<S> Filter<S> for RaftTimeouts {
    fn enabled(&self, _meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        if is_unanswered(event) {
            TIMEOUTS.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn unanswered_rpcs_are_counted_not_logged_and_the_rest_passes() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_filter(RaftTimeouts),
        );
        let before = unanswered_rpcs();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "openraft::replication", err = %"timeout after 50ms when AppendEntries 1->2", "RPCError");
            tracing::error!(target: "openraft::core::raft_core", error = %"Unreachable node: vote to raft member 3: no responders", "while requesting vote");
            tracing::error!(target: "openraft::replication", err = %"NetworkError: append to raft member 3 timed out after 50ms", "RPCError");
            tracing::error!(target: "openraft::storage", error = %"disk full", "storage error");
            tracing::error!(target: "lineage_host", err = %"timeout waiting for the model", "turn failed");
            tracing::warn!(target: "openraft::replication", err = %"timeout", "slow");
        });
        let logged = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(unanswered_rpcs() - before, 3, "{logged}");
        assert!(!logged.contains("AppendEntries"), "{logged}");
        assert!(!logged.contains("requesting vote"), "{logged}");
        assert!(logged.contains("disk full"), "{logged}");
        assert!(logged.contains("timeout waiting for the model"), "{logged}");
        assert!(logged.contains("slow"), "{logged}");
    }
}
