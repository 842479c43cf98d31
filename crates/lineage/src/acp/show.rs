//! What the tree emits, as ACP `session/update` notifications (F1, F2): agent text as
//! `agent_message_chunk`, descendants as `subagent_update` on their parent's session, a report
//! as a `session_message` in the reporting child's own session.

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Cost, IdleStateUpdate, RunningStateUpdate,
    SessionCancelCapabilities, SessionId as AcpSessionId, SessionMessage, SessionNotification,
    SessionUpdate, StateUpdate, SubagentSessionCapabilities, SubagentUpdate, UnknownStateUpdate,
    UsageUpdate,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::Client;

use super::tree::{ChildState, Emit};

fn state(s: ChildState) -> StateUpdate {
    match s {
        ChildState::Running => StateUpdate::Running(RunningStateUpdate::new()),
        ChildState::Idle => StateUpdate::Idle(IdleStateUpdate::new()),
        ChildState::Unknown => StateUpdate::Unknown(UnknownStateUpdate::new()),
    }
}

/// The notification for one emit (`None` for the turn markers, which are not shown).
pub(crate) fn notification(emit: Emit) -> Option<SessionNotification> {
    Some(match emit {
        Emit::Announce {
            parent,
            child,
            title,
            state: s,
        } => SessionNotification::new(
            parent.to_string(),
            SessionUpdate::SubagentUpdate(
                SubagentUpdate::new(child.to_string())
                    .title(title)
                    .capabilities(
                        SubagentSessionCapabilities::new().cancel(SessionCancelCapabilities::new()),
                    )
                    .state(state(s)),
            ),
        ),
        Emit::State {
            parent,
            child,
            state: s,
            note,
        } => {
            let mut update = SubagentUpdate::new(child.to_string()).state(state(s));
            if let Some(note) = note {
                update = update.description(note);
            }
            SessionNotification::new(parent.to_string(), SessionUpdate::SubagentUpdate(update))
        }
        Emit::Text { session, text } => agent_text(&session.to_string(), text),
        Emit::Report {
            child,
            parent,
            message_id,
            text,
        } => SessionNotification::new(
            child.to_string(),
            SessionUpdate::SessionMessage(
                SessionMessage::new(message_id)
                    .sender_session_id(AcpSessionId::new(child.to_string()))
                    .recipient_session_id(AcpSessionId::new(parent.to_string()))
                    .content(vec![ContentBlock::from(text)]),
            ),
        ),
        Emit::Usage {
            session,
            used,
            size,
            cost,
        } => {
            let mut update = UsageUpdate::new(used, size);
            if let Some((micros, currency)) = cost {
                update = update.cost(Cost::new(micros as f64 / 1_000_000.0, currency));
            }
            SessionNotification::new(session.to_string(), SessionUpdate::UsageUpdate(update))
        }
        Emit::RootTurnStarted { .. } | Emit::RootTurnEnded { .. } => return None,
    })
}

/// `agent_message_chunk` of `text` in `session`.
pub(crate) fn agent_text(session: &str, text: String) -> SessionNotification {
    SessionNotification::new(
        session.to_owned(),
        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::from(text))),
    )
}

/// `user_message_chunk` of `text` in `session` (a loaded transcript).
pub(crate) fn user_text(session: &str, text: String) -> SessionNotification {
    SessionNotification::new(
        session.to_owned(),
        SessionUpdate::UserMessageChunk(ContentChunk::new(ContentBlock::from(text))),
    )
}

/// Sends one emit to the client (a send that fails means the client is gone: logged).
pub(crate) fn send(client: &ConnectionTo<Client>, emit: Emit) {
    if let Some(n) = notification(emit) {
        if let Err(e) = client.send_notification(n) {
            tracing::debug!(error = %e, "cannot send a session/update");
        }
    }
}
