//! The typed journal: the events a hosted agent writes to its session log (X2, M1–M3, E1).
//!
//! A [`SessionEvent`] on the wire is `{seq, kind, data, at_ms}`, with `data` a JSON object
//! whose shape depends on `kind`. [`JournalEvent`] is that pair as one serde enum: one variant
//! per kind the host writes, so nothing builds or reads those payloads by hand. The JSON stays
//! what it always was (`tests/journal_golden.rs` pins the bytes): [`JournalEvent::to_parts`]
//! gives the `(kind, data)` to store and [`JournalEvent::from_event`] reads a stored event back.
//!
//! Kinds the agent does not write itself (the seed's `subagent/descriptor`, `sandbox/mode`,
//! `approval/policy`, the host's record of the agent to run, `host/agent`
//! (`lineage_host::AgentRecord`), a driver's own record such as `acp/session`, and whatever a newer
//! version adds) are not journal events: `from_event` returns `Ok(None)` for them, so a log is
//! always readable.
//!
//! | kind | variant | data |
//! |---|---|---|
//! | `inbox/accepted` | [`JournalEvent::Accepted`] | `{message, wake, dedup_id, request_id?}`: a message durably accepted |
//! | `turn/start` | [`JournalEvent::TurnStart`] | `{index, inputs}`: the log seqs a turn consumed |
//! | `turn/user` | [`JournalEvent::TurnUser`] | `{text}`: each input as transcript text |
//! | `turn/assistant` | [`JournalEvent::TurnAssistant`] | `{text}` |
//! | `turn/end` | [`JournalEvent::TurnEnd`] | `{index, stop_reason, error?}` |
//! | `outbox/report` | [`JournalEvent::ReportSent`] | `{seq, content, delivery}` (M1) |
//! | `outbox/settled` | [`JournalEvent::SettledSent`] | `{seq, stop_reason, summary}` (M2) |
//! | `subagent/spawned` | [`JournalEvent::Spawned`] | `{child, shape, node, run}` |
//! | `subagent/result` | [`JournalEvent::ChildResult`] | `{child, result}`: a one-shot child's result |
//! | `subagent/spawn-refused` | [`JournalEvent::SpawnRefused`] | `{error}` |
//! | `turn/inputs` | [`JournalEvent::TurnInputs`] | `{index, inputs}`: the log seqs a running turn received while it waited for its children |

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::descriptor::SubagentShape;
use crate::error::CoreError;
use crate::ids::{NodeId, RunId, SessionId};
use crate::log::{SessionEvent, SessionLog};
use crate::messages::{Delivery, StopReason};

/// Where a message in a turn's input came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TurnMessage {
    /// A user (or parent followup) message.
    User {
        /// The text.
        content: String,
    },
    /// A child's report (M1), relayed into this agent's inbox.
    SubagentReport {
        /// The reporting child.
        sender_session_id: SessionId,
        /// The text.
        content: String,
    },
    /// A child's settlement notice (M2): one line.
    SubagentSettled {
        /// The settled child.
        sender_session_id: SessionId,
        /// One-line summary.
        summary: String,
        /// Paths its files changed against the files it started from (issue 39), when it
        /// has a workspace and they changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        changed: Option<u64>,
    },
}

impl TurnMessage {
    /// The message as transcript text (`turn/user`).
    pub fn render(&self) -> String {
        match self {
            TurnMessage::User { content } => content.clone(),
            TurnMessage::SubagentReport {
                sender_session_id,
                content,
            } => format!("report from {sender_session_id}: {content}"),
            TurnMessage::SubagentSettled {
                sender_session_id,
                summary,
                changed,
            } => match changed {
                Some(n) => format!("settled {sender_session_id}: {summary} ({n} paths changed)"),
                None => format!("settled {sender_session_id}: {summary}"),
            },
        }
    }
}

/// Data of `inbox/accepted`: a message durably accepted (M1, M2, M3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// The message.
    pub message: TurnMessage,
    /// Whether it wakes the agent (a followup, a settlement, a `wakeup` report) or only waits
    /// for the next turn (a `quiet` report).
    pub wake: bool,
    /// An inbox message's dedup id (`<child>-<seq>`, its `Nats-Msg-Id`): accepted once, ever.
    #[serde(default)]
    pub dedup_id: Option<String>,
    /// A followup's request id, when its sender gave one (M3): a retry is recognised by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Accepted {
    /// The first prompt of a new session, accepted with its creation window: a waking user
    /// message the agent's first turn takes. A top-level session with no prompt has none: it
    /// starts idle, and its first followup is its first turn (an ACP front door's
    /// `session/new`). A child always gets one (its turn is what it was spawned for).
    pub fn first_prompt(prompt: String, top_level: bool) -> Option<Accepted> {
        if top_level && prompt.is_empty() {
            return None;
        }
        Some(Accepted {
            message: TurnMessage::User { content: prompt },
            wake: true,
            dedup_id: None,
            request_id: None,
        })
    }

    /// The keys this message is accepted once under (its dedup id, its followup request id).
    pub fn once_keys(&self) -> impl Iterator<Item = String> + '_ {
        self.dedup_id
            .iter()
            .cloned()
            .chain(self.request_id.iter().map(|r| followup_key(r)))
    }
}

/// The key a followup sent with `request_id` is accepted once under (M3).
fn followup_key(request_id: &str) -> String {
    format!("followup-{request_id}")
}

/// Whether `log` holds a followup accepted under `request_id` (M3). A retried followup that
/// finds one is answered `already_delivered` without waking the session: a cold one is not
/// resumed for it, since its resumed run would have no message to take and never settle (the
/// chaos run seed 23 left such a child `running`). An `inbox/accepted` whose data is
/// unreadable is not a match here (resuming reports it).
pub fn followup_accepted(log: &SessionLog, request_id: &str) -> bool {
    let key = followup_key(request_id);
    log.own_events_of_kind("inbox/accepted").any(|event| {
        serde_json::from_value::<Accepted>(event.data.clone())
            .is_ok_and(|accepted| accepted.once_keys().any(|k| k == key))
    })
}

/// One event of an agent's journal (see the module docs for the table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data")]
pub enum JournalEvent {
    /// `inbox/accepted`.
    #[serde(rename = "inbox/accepted")]
    Accepted(Accepted),
    /// `turn/start`.
    #[serde(rename = "turn/start")]
    TurnStart {
        /// The turn's index (0 first, counting every turn of the session).
        index: u64,
        /// Log seqs of the `inbox/accepted` events the turn consumed.
        inputs: Vec<u64>,
    },
    /// `turn/inputs`: messages a running turn received while it waited for its children.
    #[serde(rename = "turn/inputs")]
    TurnInputs {
        /// The turn's index.
        index: u64,
        /// Log seqs of the `inbox/accepted` events it received.
        inputs: Vec<u64>,
    },
    /// `turn/user`.
    #[serde(rename = "turn/user")]
    TurnUser {
        /// One input message as text.
        text: String,
    },
    /// `turn/assistant`.
    #[serde(rename = "turn/assistant")]
    TurnAssistant {
        /// The reply.
        text: String,
    },
    /// `turn/end`.
    #[serde(rename = "turn/end")]
    TurnEnd {
        /// The turn's index.
        index: u64,
        /// How it ended.
        stop_reason: StopReason,
        /// Why it failed or was cut short, one line.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// `outbox/report`.
    #[serde(rename = "outbox/report")]
    ReportSent {
        /// Outbox seq (the dedup id is `<session>-<seq>`).
        seq: u64,
        /// The text.
        content: String,
        /// quiet or wakeup.
        delivery: Delivery,
    },
    /// `outbox/settled`.
    #[serde(rename = "outbox/settled")]
    SettledSent {
        /// Outbox seq.
        seq: u64,
        /// The settlement's stop reason.
        stop_reason: StopReason,
        /// One-line summary.
        summary: String,
    },
    /// `subagent/spawned`.
    #[serde(rename = "subagent/spawned")]
    Spawned {
        /// The child.
        child: SessionId,
        /// Its shape.
        shape: SubagentShape,
        /// The node hosting it.
        node: NodeId,
        /// Its run id (a child always has one; `null` is kept readable).
        run: Option<RunId>,
        /// The fingerprint of the call that asked for it (T5: a resumed turn that asks the
        /// same is answered with this child, not a second birth).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call: Option<String>,
    },
    /// `subagent/result`.
    #[serde(rename = "subagent/result")]
    ChildResult {
        /// The one-shot child.
        child: SessionId,
        /// Its result (`{output, structured, stop_reason}`), as JSON.
        result: Value,
    },
    /// `subagent/spawn-refused`.
    #[serde(rename = "subagent/spawn-refused")]
    SpawnRefused {
        /// The refusal, one line.
        error: String,
    },
    /// `workspace/snapshot`: the session's files are in this stored snapshot (its base in the
    /// creation window, a checkpoint before a `turn/end`; issue 39).
    #[serde(rename = "workspace/snapshot")]
    WorkspaceSnapshot(crate::workspace::WorkspaceSnapshot),
    /// `driver/state`: what the session's driver keeps of its agent across a cold resume,
    /// written with the `turn/end` of the turn that changed it (an A2A agent's remote task).
    /// The driver reads the last one back at start; nothing else interprets it.
    #[serde(rename = "driver/state")]
    DriverState(Value),
}

/// Every kind a [`JournalEvent`] can have.
pub const JOURNAL_KINDS: [&str; 13] = [
    "inbox/accepted",
    "turn/start",
    "turn/user",
    "turn/assistant",
    "turn/end",
    "outbox/report",
    "outbox/settled",
    "subagent/spawned",
    "subagent/result",
    "subagent/spawn-refused",
    "turn/inputs",
    crate::workspace::SNAPSHOT_EVENT,
    "driver/state",
];

impl JournalEvent {
    /// The event's kind, e.g. `turn/end`.
    pub fn kind(&self) -> &'static str {
        match self {
            JournalEvent::Accepted(_) => JOURNAL_KINDS[0],
            JournalEvent::TurnStart { .. } => JOURNAL_KINDS[1],
            JournalEvent::TurnUser { .. } => JOURNAL_KINDS[2],
            JournalEvent::TurnAssistant { .. } => JOURNAL_KINDS[3],
            JournalEvent::TurnEnd { .. } => JOURNAL_KINDS[4],
            JournalEvent::ReportSent { .. } => JOURNAL_KINDS[5],
            JournalEvent::SettledSent { .. } => JOURNAL_KINDS[6],
            JournalEvent::Spawned { .. } => JOURNAL_KINDS[7],
            JournalEvent::ChildResult { .. } => JOURNAL_KINDS[8],
            JournalEvent::SpawnRefused { .. } => JOURNAL_KINDS[9],
            JournalEvent::TurnInputs { .. } => JOURNAL_KINDS[10],
            JournalEvent::WorkspaceSnapshot(_) => JOURNAL_KINDS[11],
            JournalEvent::DriverState(_) => JOURNAL_KINDS[12],
        }
    }

    /// `(kind, data)` as stored in a [`SessionEvent`].
    pub fn to_parts(&self) -> (&'static str, Value) {
        let data = match serde_json::to_value(self) {
            Ok(Value::Object(mut map)) => map.remove("data").unwrap_or(Value::Null),
            // A derived adjacently tagged enum always serializes to an object; every field
            // type here (strings, numbers, ids, JSON values) serializes without error.
            Ok(_) | Err(_) => Value::Null,
        };
        (self.kind(), data)
    }

    /// Reads a stored event: `Ok(None)` for a kind the agent does not write (see the module
    /// docs), an error naming the kind and the reason for a journal kind whose data is not
    /// what that kind holds.
    pub fn from_event(
        session: &SessionId,
        event: &SessionEvent,
    ) -> Result<Option<JournalEvent>, CoreError> {
        Self::from_parts(&event.kind, &event.data).map_err(|reason| CoreError::InvalidLog {
            session: session.to_string(),
            reason: format!("event {} ({}): {reason}", event.seq, event.kind),
        })
    }

    /// [`JournalEvent::from_event`] on a bare `(kind, data)`.
    pub fn from_parts(kind: &str, data: &Value) -> Result<Option<JournalEvent>, String> {
        if !JOURNAL_KINDS.contains(&kind) {
            return Ok(None);
        }
        let tagged = serde_json::json!({"kind": kind, "data": data});
        serde_json::from_value(tagged)
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn f1_a_top_level_session_without_a_prompt_starts_idle_a_child_never_does() {
        use super::{Accepted, TurnMessage};
        assert_eq!(Accepted::first_prompt(String::new(), true), None);
        for (prompt, top_level) in [("", false), ("go", true), ("go", false)] {
            let first = Accepted::first_prompt(prompt.into(), top_level).expect("a first prompt");
            assert!(first.wake);
            assert_eq!(
                first.message,
                TurnMessage::User {
                    content: prompt.into()
                }
            );
        }
    }

    use super::*;

    #[test]
    fn kinds_round_trip_and_foreign_kinds_are_not_journal_events() {
        let end = JournalEvent::TurnEnd {
            index: 3,
            stop_reason: StopReason::Interrupted,
            error: None,
        };
        let (kind, data) = end.to_parts();
        assert_eq!(kind, "turn/end");
        assert_eq!(
            data,
            serde_json::json!({"index": 3, "stop_reason": "interrupted"})
        );
        assert_eq!(JournalEvent::from_parts(kind, &data), Ok(Some(end)));
        assert_eq!(
            JournalEvent::from_parts("acp/session", &serde_json::json!({})),
            Ok(None)
        );
    }

    #[test]
    fn a_journal_kind_with_bad_data_is_an_error_naming_it() {
        let bad = SessionEvent {
            seq: 7,
            kind: "turn/end".into(),
            data: serde_json::json!({"index": "x"}),
            at_ms: 0,
        };
        let session = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap();
        let err = JournalEvent::from_event(&session, &bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("event 7 (turn/end)"), "{err}");
    }

    #[test]
    fn m3_a_followup_in_the_log_is_found_by_its_request_id_and_only_by_it() {
        let session = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap();
        let event = |seq: u64, request_id: Option<&str>, dedup_id: Option<&str>| SessionEvent {
            seq,
            kind: "inbox/accepted".into(),
            data: serde_json::to_value(Accepted {
                message: TurnMessage::User {
                    content: "more work".into(),
                },
                wake: true,
                dedup_id: dedup_id.map(str::to_owned),
                request_id: request_id.map(str::to_owned),
            })
            .unwrap(),
            at_ms: 0,
        };
        let log = SessionLog::from_events(
            session,
            vec![
                event(1, None, None),
                event(2, Some("r-1"), None),
                // A dedup id that happens to read like a request id is not a followup's.
                event(3, None, Some("r-2")),
                SessionEvent {
                    seq: 4,
                    kind: "inbox/accepted".into(),
                    data: serde_json::json!({"broken": true}),
                    at_ms: 0,
                },
            ],
            0,
        )
        .unwrap();
        assert!(followup_accepted(&log, "r-1"));
        assert!(!followup_accepted(&log, "r-2"));
        assert!(!followup_accepted(&log, "r-3"));
    }
}
