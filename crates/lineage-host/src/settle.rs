//! Settle (X2, M2, E1): the settlement steps the engine emits (`lineage_core::engine::settle`),
//! executed by the agent task (`agent/exec.rs`) in its order:
//! capture the result, commit `settled` in the registry, dispose the handle, emit
//! `subagent/end` (paired with `subagent/start` by run id), deliver the notice to the durable
//! parent's inbox. The notice is never published before the registry commit: if the commit
//! fails, the agent stops without notifying and stays resumable.
//!
//! A one-shot child settles the same way on success or failure alike (S1), but its result goes
//! back to the spawning caller instead of the parent inbox, and its commit disposes it in the
//! registry at once (a one-shot run is never resumed): one registry write, not two.

use std::time::Duration;

use lineage_core::ids::SessionId;
use lineage_core::messages::InboxMessage;

/// How long [`publish_with_retry`] waits at most between two attempts.
const PUBLISH_PAUSE_MAX: Duration = Duration::from_secs(5);

/// Publishes to a parent inbox until it is published (the dedup id makes retries harmless),
/// 100 ms apart doubling to [`PUBLISH_PAUSE_MAX`]. A report or notice is in the child's log
/// (its outbox) before this runs, and nothing else sends it: giving up would lose it for good.
/// Issue 12 (`lineage chaos`): after five quick attempts (about 1.5 s) it used to give up, so
/// a nats-server down for longer left a committed settlement unheard and its parent waiting.
/// Only the host's shutdown stops it (counted in `inbox_publish_failures`). The current
/// trace context goes along as the `traceparent` header. True once published.
pub(crate) async fn publish_with_retry(
    shared: &crate::shared::Shared,
    session: &SessionId,
    message: InboxMessage,
) -> bool {
    let traceparent = lineage_bus::trace::current().map(|c| c.traceparent());
    let mut attempt = 0u32;
    loop {
        let outcome = tokio::select! {
            r = shared.bus.inbox.publish(&message, traceparent.as_deref()) => r,
            _ = shared.lifetime.shutdown.cancelled() => break,
        };
        let e = match outcome {
            Ok(_) => {
                if attempt > 0 {
                    tracing::info!(%session, attempt, "inbox publish succeeded after retries");
                }
                return true;
            }
            Err(e) => e,
        };
        attempt += 1;
        if attempt <= 5 || attempt.is_multiple_of(10) {
            tracing::warn!(%session, error = %e, attempt, "inbox publish failed; retrying");
        }
        let pause = Duration::from_millis(100u64 << attempt.min(6)).min(PUBLISH_PAUSE_MAX);
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shared.lifetime.shutdown.cancelled() => break,
        }
    }
    tracing::error!(%session, attempt, dedup_id = %message.dedup_id(), "inbox publish not done at shutdown; the parent will not hear of it");
    shared.metrics.inbox_publish_failed();
    false
}
