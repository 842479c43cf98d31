//! Settle (X2, M2, E1): the settlement steps the activation emits, executed in its order:
//! capture the result, commit `settled` in the registry, dispose the handle, emit
//! `subagent/end` (paired with `subagent/start` by run id), deliver the notice to the durable
//! parent's inbox. The notice is never published before the registry commit: if the commit
//! fails, the agent stops without notifying and stays resumable.
//!
//! A one-shot child settles the same way on success or failure alike (S1), but its result goes
//! back to the spawning caller instead of the parent inbox, and its commit disposes it in the
//! registry at once (a one-shot run is never resumed): one registry write, not two.

use std::time::Duration;

use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::SessionId;
use lineage_core::messages::{
    settlement_summary, InboxMessage, LifecycleEvent, StopReason, SubagentSettled,
};
use lineage_registry::types::{Command, RegistryRefusal, SessionState};
use serde_json::json;

use crate::agent::{parse_stop_reason, AgentTask, SETTLED_SENT_EVENT};
use crate::control::OneShotResult;
use crate::error::HostError;

impl AgentTask {
    /// Step 1: capture the result (last assistant message and stop reason). A continuable
    /// child also writes its settlement notice now: the notice (outbox seq, summary, output)
    /// is staged as `outbox/settled` and becomes durable with the commit's flush (step 2), so
    /// after the commit the notice goes out at once, and a resumed child never reuses its seq.
    pub(crate) fn capture(&mut self, stop_reason: Option<&str>) {
        let stop = self
            .forced_stop
            .unwrap_or_else(|| parse_stop_reason(stop_reason));
        self.captured = Some(OneShotResult {
            output: self.last_assistant.clone(),
            structured: None,
            stop_reason: stop,
        });
        let parent = match (self.shape, self.header.parent_session()) {
            (Some(SubagentShape::Continuable), Some(parent)) => parent.clone(),
            (Some(SubagentShape::Continuable), None) | (Some(SubagentShape::OneShot) | None, _) => {
                return
            }
        };
        self.outbox_seq += 1;
        let label = self
            .descriptor
            .as_ref()
            .and_then(|d| d.label.clone())
            .unwrap_or_else(|| self.session.to_string());
        let output = self.last_assistant.clone();
        let summary = settlement_summary(&label, stop, output.as_deref());
        self.stage(
            SETTLED_SENT_EVENT,
            json!({"seq": self.outbox_seq, "stop_reason": stop.as_str(), "summary": summary}),
        );
        self.notice = Some(SubagentSettled::new(
            self.session.clone(),
            parent,
            self.outbox_seq,
            &summary,
            stop,
            output,
            self.shared.now(),
        ));
    }

    fn stop_reason(&self) -> StopReason {
        self.captured
            .as_ref()
            .map(|c| c.stop_reason)
            .unwrap_or(self.last_stop)
    }

    /// Step 2: commit `settled` in the registry (the truth about whether a child settled).
    /// A one-shot run is settled and disposed in that one write (it is never resumed, S1); if
    /// the registry refuses the disposal because children of it are still undisposed (ones it
    /// does not own), it is only marked `settled`.
    pub(crate) async fn mark_terminal(&mut self) -> Result<(), HostError> {
        // What the run staged (its last turn, the notice) is durable before the commit.
        self.flush().await?;
        let disposed = match self.shape {
            Some(SubagentShape::OneShot) => {
                let session = self.session.clone();
                match self
                    .shared
                    .write(|request_id, at_ms| Command::Dispose {
                        request_id,
                        at_ms,
                        session: session.clone(),
                    })
                    .await
                {
                    Ok(_) => true,
                    Err(HostError::Refused(RegistryRefusal::UndisposedChildren { .. })) => false,
                    Err(e) => return Err(e),
                }
            }
            Some(SubagentShape::Continuable) | None => false,
        };
        self.disposed_at_settle = disposed;
        if !disposed {
            self.shared
                .set_state(&self.session, SessionState::Settled, self.epoch)
                .await?;
        }
        let stop = self.stop_reason();
        self.shared.metrics.settled(stop);
        tracing::info!(session = %self.session, stop_reason = stop.as_str(), "settled (committed)");
        Ok(())
    }

    /// Step 4: `subagent/end` on the parent's end subject (E1), paired by run id.
    pub(crate) async fn settle_observers(&mut self) {
        let Some(run) = &self.run else { return };
        let end = run.ended(
            self.stop_reason(),
            self.last_assistant.clone(),
            self.shared.now(),
        );
        if let Err(e) = self
            .shared
            .lifecycle
            .publish(&LifecycleEvent::End(end))
            .await
        {
            tracing::warn!(session = %self.session, error = %e, "cannot publish subagent/end");
        }
    }

    /// Step 5: the settlement notice to the durable parent's inbox (M2), wherever the parent
    /// runs (R2); for a one-shot child, the result to the caller and a registry dispose.
    pub(crate) async fn deliver_settlement(&mut self, parent: SessionId, child: SessionId) {
        let stop = self.stop_reason();
        if self.shape == Some(SubagentShape::OneShot) {
            let result = self.captured.clone().unwrap_or(OneShotResult {
                output: self.last_assistant.clone(),
                structured: None,
                stop_reason: stop,
            });
            // The caller gets the result once the run is settled (and disposed, normally);
            // the inbox consumer is cleanup, after it.
            if let Some(tx) = self.one_shot.take() {
                let _ = tx.send(result);
            }
            // Its inbox consumer exists only if it spawned (see `AgentTask::open_inbox`).
            if self.disposed_at_settle && self.unopened_inbox.is_none() {
                let _ = self.shared.inbox.delete_consumer(&child).await;
            }
            return;
        }
        // Written at capture and durable since the commit's flush.
        let Some(notice) = self.notice.take() else {
            tracing::error!(session = %child, %parent, "no settlement notice was captured; not notifying");
            return;
        };
        publish_with_retry(&self.shared, &self.session, InboxMessage::Settled(notice)).await;
    }
}

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
