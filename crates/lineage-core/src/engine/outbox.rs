//! The outbox read back (M1, M2, issue 12): the reports and settlement notices a child logged
//! (`outbox/report`, `outbox/settled`), rebuilt from its log as the messages its parent's inbox
//! receives. A child publishes each one after it is durable in its log and keeps publishing
//! until the inbox takes it; if its node dies first, the message is in the log only. A node that
//! adopts the child's node sends them again ([`outbox_messages`]); the dedup id
//! (`<child>-<seq>`) makes a message the parent already has a no-op, in the inbox stream's
//! duplicate window and in the parent's log alike. Pure.

use crate::error::CoreError;
use crate::ids::SessionId;
use crate::journal::JournalEvent;
use crate::log::SessionEvent;
use crate::messages::{InboxMessage, SubagentReport, SubagentSettled};

/// Every message `session`'s outbox holds for `parent`, in the order they were logged, rebuilt
/// from its own events (the log after its fork seed). A notice's output is the child's last
/// assistant text before it (what the settlement captured); its time is the event's. An event
/// of a journal kind whose data is unreadable is an error naming it.
pub fn outbox_messages(
    session: &SessionId,
    parent: &SessionId,
    own_events: &[SessionEvent],
) -> Result<Vec<InboxMessage>, CoreError> {
    let mut last_assistant: Option<String> = None;
    let mut messages = Vec::new();
    for event in own_events {
        let Some(journal) = JournalEvent::from_event(session, event)? else {
            continue;
        };
        match journal {
            JournalEvent::TurnAssistant { text } => last_assistant = Some(text),
            JournalEvent::ReportSent {
                seq,
                content,
                delivery,
            } => messages.push(InboxMessage::Report(SubagentReport {
                sender_session_id: session.clone(),
                parent_session_id: parent.clone(),
                seq,
                content,
                delivery,
                at_ms: event.at_ms,
            })),
            JournalEvent::SettledSent {
                seq,
                stop_reason,
                summary,
            } => messages.push(InboxMessage::Settled(SubagentSettled::new(
                session.clone(),
                parent.clone(),
                seq,
                &summary,
                stop_reason,
                last_assistant.clone(),
                event.at_ms,
            ))),
            JournalEvent::TurnStart { .. }
            | JournalEvent::TurnInputs { .. }
            | JournalEvent::TurnEnd { .. }
            | JournalEvent::Accepted(_)
            | JournalEvent::TurnUser { .. }
            | JournalEvent::Spawned { .. }
            | JournalEvent::ChildResult { .. }
            | JournalEvent::SpawnRefused { .. }
            | JournalEvent::WorkspaceSnapshot(_)
            | JournalEvent::DriverState(_) => {}
        }
    }
    Ok(messages)
}
