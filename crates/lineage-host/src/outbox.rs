//! Sending a dead node's outboxes again (M1, M2, issue 12).
//!
//! A child logs each report and its settlement notice (its outbox) before publishing it, and
//! publishes until the parent's inbox takes it ([`crate::settle::publish_with_retry`]). A node
//! that dies (or shuts down) in between leaves the message in the log only, and a settled
//! session is never re-adopted, so nothing else would send it: its parent would wait for that
//! child for good. So when a node adopts sessions from a node (its own restart, or a takeover),
//! it also sends again the outbox of every continuable child placed there (`running`,
//! `waiting` or `settled`) whose parent still reads its inbox (`running` or `waiting`): the
//! messages are rebuilt from the child's log ([`lineage_core::engine::outbox`]) and published
//! with their dedup ids, so a message the parent already has is a no-op. Each session's outbox
//! is sent again at most once per node process (a takeover sweeps a dead node every lease
//! period).

use std::collections::HashMap;
use std::sync::Arc;

use lineage_core::engine::outbox::outbox_messages;
use lineage_core::ids::SessionId;
use lineage_core::log::SessionLog;
use lineage_registry::types::{SessionRecord, SessionState};

use crate::error::HostError;
use crate::settle::publish_with_retry;
use crate::shared::Shared;

/// True when `record` may have an outbox its node never finished sending: a continuable child
/// that was hosted (`running`, `waiting` or `settled`). Pure.
pub fn may_hold_unsent_outbox(record: &SessionRecord) -> bool {
    let hosted = match record.state {
        SessionState::Running | SessionState::Waiting | SessionState::Settled => true,
        SessionState::Starting | SessionState::Disposed => false,
    };
    hosted && !record.is_one_shot() && record.header.parent_session().is_some()
}

impl Shared {
    /// Sends again, in the background, the outboxes of the `placed` sessions of an adopted
    /// node (see the module documentation).
    pub(crate) fn resend_outboxes(self: &Arc<Self>, placed: &[SessionRecord]) {
        let children: Vec<SessionRecord> = {
            let mut resent = self.live.resent.lock().unwrap_or_else(|e| e.into_inner());
            placed
                .iter()
                .filter(|r| may_hold_unsent_outbox(r))
                .filter(|r| resent.insert(r.header.id().clone()))
                .cloned()
                .collect()
        };
        if children.is_empty() {
            return;
        }
        let shared = self.clone();
        let task = tokio::spawn(async move {
            let mut parents_read: HashMap<SessionId, bool> = HashMap::new();
            let mut sent = 0usize;
            for child in &children {
                let Some(parent) = child.header.parent_session() else {
                    continue;
                };
                let reads = match parents_read.get(parent) {
                    Some(reads) => *reads,
                    None => {
                        let reads = match shared.registry.session(parent.clone()).await {
                            Ok(Some(p)) => {
                                matches!(p.state, SessionState::Running | SessionState::Waiting)
                            }
                            Ok(None) => false,
                            Err(e) => {
                                tracing::warn!(session = %child.header.id(), error = %e, "cannot read the parent's record; its outbox is not sent again");
                                continue;
                            }
                        };
                        parents_read.insert(parent.clone(), reads);
                        reads
                    }
                };
                if !reads {
                    continue;
                }
                match shared.resend_outbox(child, parent).await {
                    Ok(n) => sent += n,
                    Err(e) => {
                        tracing::warn!(session = %child.header.id(), error = %e, "cannot send its outbox again")
                    }
                }
            }
            tracing::info!(
                sessions = children.len(),
                messages = sent,
                "outboxes of adopted sessions sent again"
            );
        });
        self.lifetime
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }

    /// Publishes every message of `child`'s outbox to `parent`'s inbox again; returns how many.
    async fn resend_outbox(
        &self,
        child: &SessionRecord,
        parent: &SessionId,
    ) -> Result<usize, HostError> {
        let session = child.header.id().clone();
        let (events, _) = self.bus.events.read(&session).await?;
        let log = SessionLog::from_events(
            session.clone(),
            events,
            child.header.seed_length().unwrap_or(0),
        )?;
        let messages = outbox_messages(&session, parent, log.events_after_seed())?;
        let mut sent = 0;
        for message in messages {
            if !publish_with_retry(self, &session, message).await {
                break; // the host is shutting down
            }
            sent += 1;
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lineage_core::header::{child_session_meta, SessionHeader};

    use lineage_core::ids::sid;

    #[test]
    fn m2_only_hosted_continuable_children_may_hold_an_unsent_outbox() {
        let mut top = SessionRecord::new(
            SessionHeader::top_level(sid(1), None, None),
            SessionState::Settled,
        );
        assert!(
            !may_hold_unsent_outbox(&top),
            "a top-level session has no outbox"
        );
        let header = child_session_meta(&top.header, sid(2), 1, 0, None).unwrap();
        let mut child = SessionRecord::new(header, SessionState::Settled);
        let states: Vec<SessionState> = SessionState::ALL
            .into_iter()
            .filter(|s| {
                child.state = *s;
                may_hold_unsent_outbox(&child)
            })
            .collect();
        assert_eq!(
            states,
            [
                SessionState::Running,
                SessionState::Waiting,
                SessionState::Settled
            ]
        );
        child.state = SessionState::Settled;
        child.descriptor =
            Some(serde_json::json!({"provider": "script", "mode": "one-shot"}).into());
        assert!(
            !may_hold_unsent_outbox(&child),
            "a one-shot's result goes to its caller, not an inbox"
        );
        top.state = SessionState::Running;
        assert!(!may_hold_unsent_outbox(&top));
    }
}
