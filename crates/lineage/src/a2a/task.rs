//! A lineage session as an A2A task, pure (A1): what a session's registry record and event log
//! say, folded into the task's state, history, artifacts and lineage metadata, and each new
//! log event as the stream update it is.
//!
//! | lineage | A2A `TaskState` |
//! |---|---|
//! | `starting`, or hosted with its first message not yet taken | `submitted` |
//! | a turn runs, or a message it was sent waits for its turn | `working` |
//! | idle after a turn that completed (or was interrupted) | `input-required`: it answered and takes the next message |
//! | idle after a turn that failed (or ran out of time, turns or budget) | `failed` |
//! | disposed by a drain or `CancelTask` (`disposed`, `interrupted`) | `canceled` |
//! | disposed idle (`idle`) or settled (`completed`) | `completed` |
//! | disposed `failed`, `deadline`, `budget`, `max_turns` | `failed` |

use std::collections::HashMap;

use a2a::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use lineage_core::journal::JournalEvent;
use lineage_core::lifecycle::SessionState;
use lineage_core::log::SessionEvent;
use lineage_core::messages::StopReason;
use lineage_protocol::agent::AgentSpec;
use serde_json::Value;

/// The kind of the host's record of what agent a session runs (`lineage_host`'s
/// `AGENT_EVENT`; its `agent` field is the spawn's [`AgentSpec`]).
const AGENT_RECORD: &str = "host/agent";

/// One turn as the log tells it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TurnView {
    /// The turn's index.
    pub index: u64,
    /// Log seqs of the accepted messages it took (at its start or while it ran).
    pub inputs: Vec<u64>,
    /// Its reply.
    pub reply: Option<String>,
    /// How it ended, once it did.
    pub end: Option<(StopReason, Option<String>)>,
}

/// What a session's log says of it as a task.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TaskLog {
    /// Its turns, in order.
    pub turns: Vec<TurnView>,
    /// The user's and the agent's messages, in order.
    pub history: Vec<(Role, String)>,
    /// Accepted messages: log seq, whether it wakes the session, the sender's request id.
    pub accepted: Vec<(u64, bool, Option<String>)>,
    /// The profile the session runs, from its host's `host/agent` record (none for an agent
    /// given by script or command line).
    pub profile: Option<String>,
}

impl TaskLog {
    /// Folds a log (or adds the events after what was folded).
    pub(crate) fn fold(&mut self, events: &[SessionEvent]) {
        for event in events {
            if event.kind == AGENT_RECORD && self.profile.is_none() {
                if let Ok(AgentSpec::Profile { profile }) =
                    serde_json::from_value(event.data["agent"].clone())
                {
                    self.profile = Some(profile);
                }
            }
            let Ok(Some(journal)) = JournalEvent::from_parts(&event.kind, &event.data) else {
                continue;
            };
            match journal {
                JournalEvent::Accepted(a) => {
                    self.accepted.push((event.seq, a.wake, a.request_id));
                }
                JournalEvent::TurnStart { index, inputs } => self.turns.push(TurnView {
                    index,
                    inputs,
                    reply: None,
                    end: None,
                }),
                JournalEvent::TurnInputs { index, inputs } => {
                    if let Some(turn) = self.turns.iter_mut().rev().find(|t| t.index == index) {
                        turn.inputs.extend(inputs);
                    }
                }
                JournalEvent::TurnUser { text } => self.history.push((Role::User, text)),
                JournalEvent::TurnAssistant { text } => {
                    if let Some(turn) = self.turns.last_mut() {
                        turn.reply = Some(text.clone());
                    }
                    self.history.push((Role::Agent, text));
                }
                JournalEvent::TurnEnd {
                    index,
                    stop_reason,
                    error,
                } => {
                    if let Some(turn) = self.turns.iter_mut().rev().find(|t| t.index == index) {
                        turn.end = Some((stop_reason, error));
                    }
                }
                JournalEvent::ReportSent { .. }
                | JournalEvent::SettledSent { .. }
                | JournalEvent::Spawned { .. }
                | JournalEvent::ChildResult { .. }
                | JournalEvent::SpawnRefused { .. }
                | JournalEvent::WorkspaceSnapshot(_)
                | JournalEvent::DriverState(_) => {}
            }
        }
    }

    /// A folded log.
    pub(crate) fn of(events: &[SessionEvent]) -> TaskLog {
        let mut log = TaskLog::default();
        log.fold(events);
        log
    }

    /// Whether a waking message waits for a turn (accepted after the last turn began and not
    /// taken by a turn).
    fn message_waits(&self) -> bool {
        let taken = |seq: u64| self.turns.iter().any(|t| t.inputs.contains(&seq));
        let last_start = self.turns.len();
        self.accepted
            .iter()
            .any(|(seq, wake, _)| *wake && !taken(*seq))
            && (last_start == 0 || self.turns.last().is_some_and(|t| t.end.is_some()))
    }

    /// The index of the turn that took the message sent with `request_id` (`None`: the first
    /// prompt, which turn 0 takes), once a turn took it.
    pub(crate) fn turn_that_took(&self, request_id: Option<&str>) -> Option<u64> {
        let Some(request_id) = request_id else {
            return self.turns.first().map(|t| t.index);
        };
        let seq = self
            .accepted
            .iter()
            .find(|(_, _, r)| r.as_deref() == Some(request_id))?
            .0;
        self.turns
            .iter()
            .find(|t| t.inputs.contains(&seq))
            .map(|t| t.index)
    }

    /// The turn with `index`, if it began.
    pub(crate) fn turn(&self, index: u64) -> Option<&TurnView> {
        self.turns.iter().find(|t| t.index == index)
    }
}

/// The state of a turn's end, for a session still hosted.
fn after_turn(stop: StopReason) -> TaskState {
    match stop {
        StopReason::Completed | StopReason::Interrupted => TaskState::InputRequired,
        StopReason::Failed
        | StopReason::MaxTurns
        | StopReason::Deadline
        | StopReason::Budget
        | StopReason::Disposed
        | StopReason::Idle => TaskState::Failed,
    }
}

/// The task state of a session (the table in the module docs).
pub(crate) fn task_state(
    state: SessionState,
    stop_reason: Option<StopReason>,
    log: &TaskLog,
) -> TaskState {
    match state {
        SessionState::Starting => TaskState::Submitted,
        SessionState::Settled => TaskState::Completed,
        SessionState::Disposed => match stop_reason {
            Some(StopReason::Completed | StopReason::Idle) => TaskState::Completed,
            Some(StopReason::Disposed | StopReason::Interrupted) | None => TaskState::Canceled,
            Some(
                StopReason::Failed
                | StopReason::Deadline
                | StopReason::Budget
                | StopReason::MaxTurns,
            ) => TaskState::Failed,
        },
        SessionState::Running | SessionState::Waiting => {
            if log.message_waits() {
                return match log.turns.is_empty() {
                    true => TaskState::Submitted,
                    false => TaskState::Working,
                };
            }
            match log.turns.last() {
                None => TaskState::Submitted,
                Some(TurnView { end: None, .. }) => TaskState::Working,
                Some(TurnView {
                    end: Some((stop, _)),
                    ..
                }) => after_turn(*stop),
            }
        }
    }
}

/// The status message of a task in `state`: the last reply, or why the last turn failed.
pub(crate) fn status_message(
    task_id: &str,
    context_id: &str,
    state: &TaskState,
    log: &TaskLog,
) -> Option<Message> {
    let last = log.turns.iter().rev().find(|t| t.end.is_some())?;
    let text = match (state, &last.end) {
        (TaskState::Failed, Some((stop, Some(error)))) => format!("{}: {error}", stop.as_str()),
        (TaskState::Failed, Some((stop, None))) => stop.as_str().to_owned(),
        _ => last.reply.clone()?,
    };
    Some(agent_message(
        task_id,
        context_id,
        text,
        format!("{task_id}-status-{}", last.index),
    ))
}

/// An agent's text message in a task.
fn agent_message(task_id: &str, context_id: &str, text: String, id: String) -> Message {
    let mut message = Message::new(Role::Agent, vec![Part::text(text)]);
    message.message_id = id;
    message.task_id = Some(task_id.into());
    message.context_id = Some(context_id.to_owned());
    message
}

/// The artifact holding turn `index`'s reply.
pub(crate) fn reply_artifact(index: u64, text: &str) -> Artifact {
    Artifact {
        artifact_id: format!("turn-{index}"),
        name: Some(format!("reply of turn {index}")),
        description: None,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
    }
}

/// Everything a task is built from.
pub(crate) struct TaskParts<'a> {
    /// The session (the task id).
    pub session: &'a str,
    /// Its root (the context id).
    pub root: &'a str,
    /// Its registry state and stop reason.
    pub state: SessionState,
    /// Why it ended, when it did.
    pub stop_reason: Option<StopReason>,
    /// Its folded log.
    pub log: &'a TaskLog,
    /// `metadata.lineage`: its place in the tree.
    pub lineage: Value,
    /// How many history messages to include (`None`: all; 0: none).
    pub history_length: Option<usize>,
}

/// The A2A task.
pub(crate) fn task(parts: TaskParts<'_>) -> Task {
    let state = task_state(parts.state, parts.stop_reason, parts.log);
    let message = status_message(parts.session, parts.root, &state, parts.log);
    let history: Vec<Message> = parts
        .log
        .history
        .iter()
        .enumerate()
        .map(|(i, (role, text))| {
            let mut m = Message::new(role.clone(), vec![Part::text(text.clone())]);
            m.message_id = format!("{}-history-{i}", parts.session);
            m.task_id = Some(parts.session.into());
            m.context_id = Some(parts.root.to_owned());
            m
        })
        .collect();
    let keep = parts
        .history_length
        .unwrap_or(history.len())
        .min(history.len());
    let history = history[history.len() - keep..].to_vec();
    let artifacts: Vec<Artifact> = parts
        .log
        .turns
        .iter()
        .filter_map(|t| t.reply.as_deref().map(|r| reply_artifact(t.index, r)))
        .collect();
    Task {
        id: parts.session.into(),
        context_id: parts.root.to_owned(),
        status: TaskStatus {
            state,
            message,
            timestamp: None,
        },
        artifacts: (!artifacts.is_empty()).then_some(artifacts),
        history: (!history.is_empty()).then_some(history),
        metadata: Some(HashMap::from([("lineage".to_owned(), parts.lineage)])),
    }
}

/// What one new log event is on a task's stream: a turn's start is `working`, its reply an
/// artifact (`turn` is the index of the turn it is in), its end the state it leaves the task
/// in (for a hosted session).
pub(crate) fn update_of(
    task_id: &str,
    context_id: &str,
    turn: u64,
    event: &SessionEvent,
) -> Option<StreamResponse> {
    let status = |state: TaskState, message: Option<Message>| {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: task_id.into(),
            context_id: context_id.to_owned(),
            status: TaskStatus {
                state,
                message,
                timestamp: None,
            },
            metadata: None,
        })
    };
    match JournalEvent::from_parts(&event.kind, &event.data).ok()?? {
        JournalEvent::TurnStart { .. } => Some(status(TaskState::Working, None)),
        JournalEvent::TurnAssistant { text } => {
            Some(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task_id.into(),
                context_id: context_id.to_owned(),
                artifact: reply_artifact(turn, &text),
                append: Some(false),
                last_chunk: Some(true),
                metadata: None,
            }))
        }
        JournalEvent::TurnEnd {
            index,
            stop_reason,
            error,
        } => {
            let state = after_turn(stop_reason);
            let text = match (&state, error) {
                (TaskState::Failed, Some(e)) => Some(format!("{}: {e}", stop_reason.as_str())),
                (TaskState::Failed, None) => Some(stop_reason.as_str().to_owned()),
                _ => None,
            };
            let message = text.map(|t| {
                agent_message(task_id, context_id, t, format!("{task_id}-status-{index}"))
            });
            Some(status(state, message))
        }
        _ => None,
    }
}

/// The terminal update of a task whose session ended (`state` terminal).
pub(crate) fn final_update(task: &Task) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        metadata: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::logs::tests::event;
    use serde_json::json;

    fn accepted(seq: u64, request: Option<&str>) -> SessionEvent {
        event(
            seq,
            "inbox/accepted",
            json!({"message": {"kind": "user", "content": "hi"}, "wake": true, "request_id": request}),
        )
    }

    fn state(log: &[SessionEvent], s: SessionState) -> TaskState {
        task_state(s, None, &TaskLog::of(log))
    }

    #[test]
    fn a1_a_sessions_turns_are_its_tasks_states() {
        let mut log = vec![accepted(1, None)];
        assert_eq!(state(&log, SessionState::Starting), TaskState::Submitted);
        assert_eq!(state(&log, SessionState::Running), TaskState::Submitted);
        log.push(event(2, "turn/start", json!({"index": 0, "inputs": [1]})));
        log.push(event(3, "turn/user", json!({"text": "hi"})));
        assert_eq!(state(&log, SessionState::Running), TaskState::Working);
        log.push(event(4, "turn/assistant", json!({"text": "hello"})));
        log.push(event(
            5,
            "turn/end",
            json!({"index": 0, "stop_reason": "completed"}),
        ));
        assert_eq!(state(&log, SessionState::Running), TaskState::InputRequired);
        // A followup waits for its turn: working again.
        log.push(accepted(6, Some("m2")));
        let folded = TaskLog::of(&log);
        assert_eq!(folded.turn_that_took(None), Some(0));
        assert_eq!(folded.turn_that_took(Some("m2")), None, "not taken yet");
        assert_eq!(state(&log, SessionState::Running), TaskState::Working);
        log.push(event(7, "turn/start", json!({"index": 1, "inputs": [6]})));
        log.push(event(
            8,
            "turn/end",
            json!({"index": 1, "stop_reason": "failed", "error": "boom"}),
        ));
        let folded = TaskLog::of(&log);
        assert_eq!(folded.turn_that_took(Some("m2")), Some(1));
        assert_eq!(state(&log, SessionState::Waiting), TaskState::Failed);
        let t = task(TaskParts {
            session: "s",
            root: "r",
            state: SessionState::Waiting,
            stop_reason: None,
            log: &folded,
            lineage: json!({}),
            history_length: Some(1),
        });
        assert_eq!(t.status.state, TaskState::Failed);
        assert_eq!(
            t.status
                .message
                .and_then(|m| m.text().map(str::to_owned))
                .as_deref(),
            Some("failed: boom")
        );
        assert_eq!(
            t.history.map(|h| h.len()),
            Some(1),
            "history_length keeps the last"
        );
        assert_eq!(
            t.artifacts.map(|a| a.len()),
            Some(1),
            "one reply, one artifact"
        );
        assert_eq!(t.context_id, "r");
    }

    #[test]
    fn a1_a_task_knows_its_profile_from_the_hosts_record() {
        let log = vec![
            event(
                1,
                "host/agent",
                json!({"agent": {"driver": "profile", "profile": "helper"}}),
            ),
            event(
                2,
                "host/agent",
                json!({"agent": {"driver": "profile", "profile": "later"}}),
            ),
        ];
        assert_eq!(TaskLog::of(&log).profile.as_deref(), Some("helper"));
        let scripted = vec![event(
            1,
            "host/agent",
            json!({"agent": {"driver": "script", "script": {"turns": []}}}),
        )];
        assert_eq!(TaskLog::of(&scripted).profile, None);
    }

    #[test]
    fn a1_a_message_taken_mid_turn_belongs_to_that_turn() {
        let log = vec![
            accepted(1, None),
            event(2, "turn/start", json!({"index": 0, "inputs": [1]})),
            accepted(3, Some("m2")),
            event(4, "turn/inputs", json!({"index": 0, "inputs": [3]})),
        ];
        assert_eq!(TaskLog::of(&log).turn_that_took(Some("m2")), Some(0));
        assert_eq!(state(&log, SessionState::Running), TaskState::Working);
    }

    #[test]
    fn a1_an_ended_session_is_terminal_by_its_stop_reason() {
        let log = TaskLog::default();
        let ended = |r| task_state(SessionState::Disposed, r, &log);
        assert_eq!(ended(Some(StopReason::Disposed)), TaskState::Canceled);
        assert_eq!(ended(None), TaskState::Canceled);
        assert_eq!(ended(Some(StopReason::Idle)), TaskState::Completed);
        assert_eq!(ended(Some(StopReason::Deadline)), TaskState::Failed);
        assert_eq!(
            task_state(SessionState::Settled, None, &log),
            TaskState::Completed
        );
        for r in StopReason::ALL {
            assert!(ended(Some(r)).is_terminal(), "{r:?}");
        }
    }

    #[test]
    fn a1_log_events_stream_as_status_and_artifact_updates() {
        let start = event(2, "turn/start", json!({"index": 0, "inputs": [1]}));
        let reply = event(3, "turn/assistant", json!({"text": "hello"}));
        let end = event(
            4,
            "turn/end",
            json!({"index": 0, "stop_reason": "completed"}),
        );
        let other = event(
            5,
            "outbox/report",
            json!({"seq": 1, "content": "r", "delivery": "quiet"}),
        );
        assert!(
            matches!(update_of("t", "c", 0, &start), Some(StreamResponse::StatusUpdate(s)) if s.status.state == TaskState::Working)
        );
        assert!(
            matches!(update_of("t", "c", 0, &reply), Some(StreamResponse::ArtifactUpdate(a)) if a.artifact.parts[0].as_text() == Some("hello"))
        );
        assert!(
            matches!(update_of("t", "c", 0, &end), Some(StreamResponse::StatusUpdate(s)) if s.status.state == TaskState::InputRequired)
        );
        assert!(update_of("t", "c", 0, &other).is_none());
    }
}
