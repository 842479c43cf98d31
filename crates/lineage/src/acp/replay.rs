//! A loaded session's transcript, replayed as what each part is (F3): pure.
//!
//! The log's `turn/user` text does not say where an input came from, so the replay reads the
//! inputs each turn took (`turn/start`, `turn/inputs`: seqs of `inbox/accepted` events) instead:
//! a user message is the user's (`user_message_chunk`), a child's report is that child's
//! message to this session (`session_message` in the child's session, as it was shown live), a
//! child's settlement notice is that child's end (a `subagent_update` with how it ended), and the
//! replies are the agent's. Reports and settlements are shown only to a client that sees
//! subagents, as live.

use std::collections::BTreeMap;

use lineage_core::ids::SessionId;
use lineage_core::journal::{Accepted, JournalEvent, TurnMessage};
use lineage_core::log::SessionEvent;

use super::tree::{ChildState, Emit};

/// One part of a replayed transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Replayed {
    /// What the user (or the editor) said.
    User(String),
    /// Something the tree shows as it did live (agent text, a report, a child's end).
    Shown(Emit),
}

/// The transcript of `session` from its log `events`, in order.
pub(crate) fn transcript(session: &SessionId, events: &[SessionEvent]) -> Vec<Replayed> {
    let mut accepted: BTreeMap<u64, Accepted> = BTreeMap::new();
    let mut out = Vec::new();
    for event in events {
        let Ok(journal) = serde_json::from_value::<JournalEvent>(serde_json::json!({
            "kind": event.kind, "data": event.data
        })) else {
            continue;
        };
        match journal {
            JournalEvent::Accepted(a) => {
                accepted.insert(event.seq, a);
            }
            JournalEvent::TurnStart { inputs, .. } | JournalEvent::TurnInputs { inputs, .. } => {
                for seq in inputs {
                    if let Some(a) = accepted.remove(&seq) {
                        out.push(input(session, seq, a.message));
                    }
                }
            }
            JournalEvent::TurnAssistant { text } => out.push(Replayed::Shown(Emit::Text {
                session: session.clone(),
                text,
            })),
            JournalEvent::TurnUser { .. }
            | JournalEvent::TurnEnd { .. }
            | JournalEvent::ReportSent { .. }
            | JournalEvent::SettledSent { .. }
            | JournalEvent::Spawned { .. }
            | JournalEvent::ChildResult { .. }
            | JournalEvent::SpawnRefused { .. }
            | JournalEvent::WorkspaceSnapshot(_)
            | JournalEvent::DriverState(_) => {}
        }
    }
    out
}

/// One input of a turn, as what it is.
fn input(session: &SessionId, seq: u64, message: TurnMessage) -> Replayed {
    match message {
        TurnMessage::User { content } => Replayed::User(content),
        TurnMessage::SubagentReport {
            sender_session_id,
            content,
        } => Replayed::Shown(Emit::Report {
            child: sender_session_id,
            parent: session.clone(),
            message_id: format!("replayed-{seq}"),
            text: content,
        }),
        TurnMessage::SubagentSettled {
            sender_session_id,
            summary,
            ..
        } => Replayed::Shown(Emit::State {
            parent: session.clone(),
            child: sender_session_id,
            state: ChildState::Idle,
            note: Some(summary),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lineage_core::ids::sid;
    use serde_json::json;

    fn event(seq: u64, kind: &str, data: serde_json::Value) -> SessionEvent {
        SessionEvent {
            seq,
            kind: kind.into(),
            data,
            at_ms: 0,
        }
    }

    #[test]
    fn f3_notices_replay_as_the_childs_report_and_end_not_as_the_user_speaking() {
        let (root, child) = (sid(1), sid(2));
        let accepted = |seq, message: TurnMessage| {
            event(
                seq,
                "inbox/accepted",
                serde_json::to_value(Accepted {
                    message,
                    wake: true,
                    dedup_id: None,
                    request_id: None,
                })
                .unwrap(),
            )
        };
        let events = vec![
            accepted(
                1,
                TurnMessage::User {
                    content: "find it".into(),
                },
            ),
            event(2, "turn/start", json!({"index": 0, "inputs": [1]})),
            event(3, "turn/user", json!({"text": "find it"})),
            event(4, "turn/assistant", json!({"text": "asked a child"})),
            accepted(
                5,
                TurnMessage::SubagentReport {
                    sender_session_id: child.clone(),
                    content: "half way".into(),
                },
            ),
            accepted(
                6,
                TurnMessage::SubagentSettled {
                    sender_session_id: child.clone(),
                    summary: "subagent scout completed: found".into(),
                    changed: None,
                },
            ),
            event(7, "turn/start", json!({"index": 1, "inputs": [5, 6]})),
            event(
                8,
                "turn/user",
                json!({"text": "subagent scout completed: found"}),
            ),
            event(9, "turn/assistant", json!({"text": "it is found"})),
            event(10, "host/agent", json!({"anything": true})),
        ];
        assert_eq!(
            transcript(&root, &events),
            vec![
                Replayed::User("find it".into()),
                Replayed::Shown(Emit::Text {
                    session: root.clone(),
                    text: "asked a child".into()
                }),
                Replayed::Shown(Emit::Report {
                    child: child.clone(),
                    parent: root.clone(),
                    message_id: "replayed-5".into(),
                    text: "half way".into()
                }),
                Replayed::Shown(Emit::State {
                    parent: root.clone(),
                    child: child.clone(),
                    state: ChildState::Idle,
                    note: Some("subagent scout completed: found".into())
                }),
                Replayed::Shown(Emit::Text {
                    session: root.clone(),
                    text: "it is found".into()
                }),
            ]
        );
    }
}
