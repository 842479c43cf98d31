//! A child as an MCP task sees it (A3): [`TurnAction::ChildTask`](lineage_drivers::driver::TurnAction::ChildTask)
//! reads the child's registry record and its event log, never the agent task's memory, so the
//! node that answers need not be the one that spawned it (the parent may have been resumed
//! elsewhere since) and a one-shot child's result is readable before the spawn's own answer.
//!
//! Whose child it is comes from the record (its header's parent), not from the engine: a
//! one-shot child joins the engine's children only when its result comes back, and a task
//! handle is read before that. [`view_of`] is pure: the record and the log in, the view out.

use std::sync::Arc;

use lineage_core::ids::SessionId;
use lineage_core::journal::JournalEvent;
use lineage_core::lifecycle::SessionState;
use lineage_core::log::SessionEvent;
use lineage_drivers::driver::{ActionOutcome, ChildTaskView};
use lineage_registry::types::SessionRecord;

use super::actions::{Side, SideDone};
use crate::shared::Shared;

/// The view of `record` (which must be a child of `parent`) with its log `events`, disposed
/// records being purged `retention` after their disposal; one line when it is not `parent`'s
/// child.
pub(crate) fn view_of(
    parent: &SessionId,
    record: &SessionRecord,
    events: &[SessionEvent],
    retention: Option<std::time::Duration>,
) -> Result<ChildTaskView, String> {
    let child = record.header.id();
    if record.header.parent_session() != Some(parent) {
        return Err(format!(
            "session {child} is not a child of session {parent}: a task names a child you spawned"
        ));
    }
    let (mut output, mut last_turn) = (None, None);
    for event in events {
        match JournalEvent::from_parts(&event.kind, &event.data) {
            Ok(Some(JournalEvent::TurnAssistant { text })) => output = Some(text),
            Ok(Some(JournalEvent::TurnEnd { stop_reason, .. })) => last_turn = Some(stop_reason),
            _ => {}
        }
    }
    Ok(ChildTaskView {
        session: child.clone(),
        state: record.state,
        stop_reason: record.stop_reason,
        shape: record
            .descriptor
            .as_ref()
            .and_then(|d| d.parse::<lineage_core::descriptor::SubagentDescriptor>())
            .map(|d| d.mode),
        output,
        last_turn,
        created_at_ms: record.created_at_ms,
        updated_at_ms: record.updated_at_ms,
        readable_for_ms: match record.state {
            SessionState::Disposed => retention.map(|kept| {
                let lived = record.updated_at_ms.saturating_sub(record.created_at_ms);
                lived.saturating_add(u64::try_from(kept.as_millis()).unwrap_or(u64::MAX))
            }),
            SessionState::Starting
            | SessionState::Running
            | SessionState::Waiting
            | SessionState::Settled => None,
        },
    })
}

/// Reads `child` for `parent` beside the task: its record (a child not registered yet is
/// refused with one line: its birth has not been written) and its log.
pub(super) fn read(shared: Arc<Shared>, parent: SessionId, child: SessionId, reply: u64) -> Side {
    Box::pin(async move {
        let outcome = match shared.registry.session(child.clone()).await {
            Ok(Some(record)) => match shared.bus.events.read(&child).await {
                Ok((events, _)) => {
                    match view_of(&parent, &record, &events, shared.cfg.disposed_after) {
                        Ok(view) => ActionOutcome::ChildTask(view),
                        Err(why) => ActionOutcome::Refused(why),
                    }
                }
                Err(e) => ActionOutcome::Refused(format!("cannot read {child}'s log now: {e}")),
            },
            Ok(None) => ActionOutcome::Refused(format!(
                "session {child} is not registered: no child of session {parent} has that id (yet)"
            )),
            Err(e) => ActionOutcome::Refused(format!("cannot read the registry now: {e}")),
        };
        SideDone::Answer {
            reply,
            outcome,
            followed_up: None,
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lineage_core::header::{child_session_meta, SessionHeader};
    use lineage_core::ids::sid;
    use lineage_core::messages::StopReason;

    use super::*;

    fn event(seq: u64, journal: &JournalEvent) -> SessionEvent {
        let (kind, data) = journal.to_parts();
        SessionEvent {
            seq,
            kind: kind.to_owned(),
            data,
            at_ms: seq,
        }
    }

    #[test]
    fn a3_a_child_task_is_read_from_its_record_and_log_and_only_by_its_parent() {
        let root = SessionRecord::new(
            SessionHeader::top_level(sid(1), None, None),
            SessionState::Running,
        );
        let header = child_session_meta(&root.header, sid(2), 1, 0, None).unwrap();
        let mut child = SessionRecord::new(header, SessionState::Running);
        child.created_at_ms = 1_000;
        child.updated_at_ms = 4_000;
        let log = [
            event(
                1,
                &JournalEvent::TurnAssistant {
                    text: "first".into(),
                },
            ),
            event(
                2,
                &JournalEvent::TurnEnd {
                    index: 0,
                    stop_reason: StopReason::Completed,
                    error: None,
                },
            ),
            event(
                3,
                &JournalEvent::TurnAssistant {
                    text: "last".into(),
                },
            ),
        ];
        let day = Some(Duration::from_secs(86_400));
        let view = view_of(&sid(1), &child, &log, day).unwrap();
        assert_eq!(view.output.as_deref(), Some("last"));
        assert_eq!(view.last_turn, Some(StopReason::Completed));
        assert_eq!(view.readable_for_ms, None, "a live child has no end yet");
        child.state = SessionState::Disposed;
        child.stop_reason = Some(StopReason::Interrupted);
        let view = view_of(&sid(1), &child, &log, day).unwrap();
        assert_eq!(view.stop_reason, Some(StopReason::Interrupted));
        assert_eq!(view.readable_for_ms, Some(3_000 + 86_400_000));
        assert_eq!(
            view_of(&sid(1), &child, &log, None)
                .unwrap()
                .readable_for_ms,
            None
        );
        let why = view_of(&sid(3), &child, &log, day).unwrap_err();
        assert!(
            why.contains("is not a child of session") && !why.contains('\n'),
            "{why}"
        );
        assert!(
            view_of(&sid(2), &root, &[], day).is_err(),
            "a root is nobody's child"
        );
    }
}
