//! A2A push notifications (issue 38, A1): a client registers a webhook for a task
//! (`CreateTaskPushNotificationConfig`) and is POSTed the task's status each time its state
//! changes, once per change, whichever gateway or node dies on the way.
//!
//! - **Where configs live:** a NATS Key-Value bucket ([`store`]), with what each config was
//!   last sent. No gateway keeps one in memory.
//! - **What a change is:** [`pending`] (pure) reads the task's log from the last position
//!   delivered: each event is a possible state (a turn's start is `working`, its end
//!   `input-required` or `failed`; the registry record decides the last one: `completed`,
//!   `canceled`, ...). Equal states in a row are one; a state that lasted a moment between
//!   two reads is still sent, because the log keeps it.
//! - **Who sends it:** every gateway runs the delivery loop ([`deliver`]). A gateway claims a
//!   transition in the config's entry (compare and set by revision, 30 s), POSTs it, then
//!   records it delivered (compare and set again). A gateway that dies between the POST and
//!   the record leaves a claim that lapses; another sends the same transition again, with the
//!   same `metadata.lineage.notification` id (`<task>:<seq>:<state>`), so a receiver can drop
//!   the repeat. A node that dies changes nothing: the log and the record are the cluster's.
//! - **What is sent:** a `StreamResponse` status update (the same JSON a stream carries), with
//!   `A2A-Notification-Token` and the config's `Authorization`, through the official server
//!   crate's `HttpPushSender`, whose guard refuses loopback, private and metadata addresses
//!   (`--push-allow-private` turns it off for trusted networks and tests).
//!
//! | file | what |
//! |---|---|
//! | `push/mod.rs` | [`pending`], [`notification`]: pure |
//! | [`configs`] | the four config operations, and what a config may be |
//! | [`store`] | the bucket |
//! | [`deliver`] | the delivery loop |

pub mod configs;
pub mod deliver;
pub mod store;

use a2a::{Message, StreamResponse, TaskState, TaskStatus, TaskStatusUpdateEvent};
use lineage_core::lifecycle::SessionState;
use lineage_core::log::SessionEvent;
use lineage_core::messages::StopReason;

use super::handler::state_name;
use super::task::{status_message, task_state, TaskLog};
use store::Mark;

/// A state to send, and the log position it was read at.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The log seq of the event after which the task was in `state` (the last seq for a state
    /// the record decided).
    pub seq: u64,
    /// The state.
    pub state: TaskState,
    /// Its message: the last reply, or why the turn failed.
    pub message: Option<Message>,
}

/// The transitions after `delivered` of task `task` (context `root`) whose whole log is
/// `events` and whose record is in `state` (`stop_reason`), oldest first. Events up to
/// `delivered.seq` were sent; a state equal to the one before it is not a transition.
pub fn pending(
    task: &str,
    root: &str,
    events: &[SessionEvent],
    delivered: &Mark,
    state: SessionState,
    stop_reason: Option<StopReason>,
) -> Vec<Transition> {
    let mut log = TaskLog::default();
    let mut last = delivered.state.clone();
    let mut out = Vec::new();
    let mut consider = |seq: u64, now: TaskState, log: &TaskLog, out: &mut Vec<Transition>| {
        let name = state_name(&now);
        if name != last {
            last = name;
            let message = status_message(task, root, &now, log);
            out.push(Transition {
                seq,
                state: now,
                message,
            });
        }
    };
    for (i, event) in events.iter().enumerate() {
        log.fold(std::slice::from_ref(event));
        let is_last = i + 1 == events.len();
        if event.seq > delivered.seq && !is_last {
            // While events were still being written, the session was alive.
            let now = task_state(SessionState::Running, None, &log);
            consider(event.seq, now, &log, &mut out);
        }
        if is_last {
            consider(
                event.seq,
                task_state(state, stop_reason, &log),
                &log,
                &mut out,
            );
        }
    }
    if events.is_empty() {
        consider(0, task_state(state, stop_reason, &log), &log, &mut out);
    }
    out
}

/// The mark of a task's state now (what a new config starts from: it is not sent).
pub fn mark_now(events: &[SessionEvent], state: SessionState, stop: Option<StopReason>) -> Mark {
    let log = TaskLog::of(events);
    Mark {
        seq: events.last().map_or(0, |e| e.seq),
        state: state_name(&task_state(state, stop, &log)),
    }
}

/// The notification id of a transition of `task`: what a receiver deduplicates by.
pub fn notification_id(task: &str, t: &Transition) -> String {
    format!("{task}:{}:{}", t.seq, state_name(&t.state))
}

/// The body POSTed for transition `t` of `task` in context `root`: a status update with the
/// message of the state (the last reply, or why it failed), and the notification id.
pub fn notification(task: &str, root: &str, t: &Transition) -> StreamResponse {
    let id = notification_id(task, t);
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.into(),
        context_id: root.to_owned(),
        status: TaskStatus {
            state: t.state.clone(),
            message: t.message.clone(),
            timestamp: None,
        },
        metadata: Some(std::collections::HashMap::from([(
            "lineage".to_owned(),
            serde_json::json!({"notification": id, "seq": t.seq}),
        )])),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::logs::tests::event;
    use serde_json::json;

    fn log() -> Vec<SessionEvent> {
        vec![
            event(
                1,
                "inbox/accepted",
                json!({"message": {"kind": "user", "content": "hi"}, "wake": true}),
            ),
            event(2, "turn/start", json!({"index": 0, "inputs": [1]})),
            event(3, "turn/assistant", json!({"text": "hello"})),
            event(
                4,
                "turn/end",
                json!({"index": 0, "stop_reason": "completed"}),
            ),
        ]
    }

    fn states(t: &[Transition]) -> Vec<(u64, String)> {
        t.iter().map(|t| (t.seq, state_name(&t.state))).collect()
    }

    #[test]
    fn a1_each_state_change_in_the_log_is_one_transition_in_order() {
        let none = Mark {
            seq: 0,
            state: state_name(&TaskState::Submitted),
        };
        let all = pending("t1", "r1", &log(), &none, SessionState::Running, None);
        assert_eq!(
            states(&all),
            vec![
                (2, "TASK_STATE_WORKING".to_owned()),
                (4, "TASK_STATE_INPUT_REQUIRED".to_owned())
            ]
        );
        // Delivered up to the start: only the end is left; then nothing.
        let working = Mark {
            seq: 2,
            state: "TASK_STATE_WORKING".to_owned(),
        };
        let rest = pending("t1", "r1", &log(), &working, SessionState::Running, None);
        assert_eq!(
            states(&rest),
            vec![(4, "TASK_STATE_INPUT_REQUIRED".to_owned())]
        );
        let done = Mark {
            seq: 4,
            state: "TASK_STATE_INPUT_REQUIRED".to_owned(),
        };
        assert!(pending("t1", "r1", &log(), &done, SessionState::Running, None).is_empty());
        // The record ends it without a log event: one more, at the same seq.
        let canceled = pending(
            "t1",
            "r1",
            &log(),
            &done,
            SessionState::Disposed,
            Some(StopReason::Disposed),
        );
        assert_eq!(
            states(&canceled),
            vec![(4, "TASK_STATE_CANCELED".to_owned())]
        );
    }

    #[test]
    fn a1_a_new_config_starts_from_the_state_now_and_ids_name_the_transition() {
        let mark = mark_now(&log(), SessionState::Running, None);
        assert_eq!(mark.seq, 4);
        assert_eq!(mark.state, "TASK_STATE_INPUT_REQUIRED");
        let t = Transition {
            seq: 4,
            state: TaskState::Canceled,
            message: None,
        };
        assert_eq!(notification_id("t1", &t), "t1:4:TASK_STATE_CANCELED");
        let StreamResponse::StatusUpdate(update) = notification("t1", "r1", &t) else {
            panic!()
        };
        assert_eq!(update.context_id, "r1");
        assert_eq!(
            update.metadata.unwrap()["lineage"]["notification"],
            "t1:4:TASK_STATE_CANCELED"
        );
    }
}
