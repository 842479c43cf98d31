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

/// Publishes to a parent inbox, retrying a few times (the dedup id makes retries harmless).
/// The current trace context goes along as the `traceparent` header. True once published.
pub(crate) async fn publish_with_retry(
    shared: &crate::host::Shared,
    session: &SessionId,
    message: InboxMessage,
) -> bool {
    let traceparent = lineage_bus::trace::current().map(|c| c.traceparent());
    let attempts = shared.cfg.registry_attempts.max(1);
    for attempt in 1..=attempts {
        match shared.inbox.publish(&message, traceparent.as_deref()).await {
            Ok(_) => return true,
            Err(e) if attempt < attempts => {
                tracing::warn!(%session, error = %e, attempt, "inbox publish failed; retrying");
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
            }
            Err(e) => {
                tracing::error!(%session, error = %e, "inbox publish failed; giving up")
            }
        }
    }
    shared.metrics.inbox_publish_failed();
    false
}
