//! `lineage logs <id> [-f]` (issue 37): a session's transcript from its event log, as
//! `kubectl logs` shows a pod's: each turn (what the agent read, what it replied, how the turn
//! ended), the reports and the settlement it sent, the children it spawned and their results.
//! `-f` follows the log as it grows and ends when the session is disposed (or on Ctrl-C).
//! `--json` prints each event as one JSON line (`seq`, `kind`, `data`, `at_ms`), all of them.
//!
//! The log is the record; this is a view of it ([`transcript_line`], a pure function of one
//! event: the events that are not part of a transcript, such as a child's descriptor or the
//! inbox's acceptances, print nothing in text).

use std::time::Duration;

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::events::{EventLogStore, LogCursor};
use lineage_core::ids::SessionId;
use lineage_core::journal::JournalEvent;
use lineage_core::log::SessionEvent;
use lineage_core::messages::{Delivery, StopReason};
use lineage_registry::{Consistency, RegistryClient, SessionRecord, SessionState};

use crate::client::{connect, parse_session, registry_error};
use crate::global::{cluster, subjects, Global};

/// `logs` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    pub session: String,
    /// Keep printing as the log grows, until the session is disposed (or Ctrl-C).
    #[arg(short, long)]
    pub follow: bool,
}

/// How often `-f` reads the log again.
const FOLLOW_EVERY: Duration = Duration::from_millis(400);

/// One event as a transcript line, or `None` for an event that is not part of a transcript.
pub(crate) fn transcript_line(event: &SessionEvent) -> Option<String> {
    let journal = JournalEvent::from_parts(&event.kind, &event.data).ok()??;
    let text = match journal {
        JournalEvent::Accepted(_)
        | JournalEvent::TurnInputs { .. }
        | JournalEvent::DriverState(_) => return None,
        JournalEvent::TurnStart { index, .. } => format!("── turn {index}"),
        JournalEvent::TurnUser { text } => format!("user: {text}"),
        JournalEvent::TurnAssistant { text } => format!("assistant: {text}"),
        JournalEvent::TurnEnd {
            index,
            stop_reason,
            error,
        } => match error {
            Some(error) => format!("── turn {index} {}: {error}", stop_reason.as_str()),
            None => format!("── turn {index} {}", stop_reason.as_str()),
        },
        JournalEvent::ReportSent {
            content, delivery, ..
        } => {
            let delivery = match delivery {
                Delivery::Quiet => "quiet",
                Delivery::Wakeup => "wakeup",
            };
            format!("report ({delivery}) sent: {content}")
        }
        JournalEvent::SettledSent {
            stop_reason,
            summary,
            ..
        } => format!("settled ({}): {summary}", stop_reason.as_str()),
        JournalEvent::Spawned {
            child, shape, node, ..
        } => format!("spawned {child} ({}) on {node}", shape.as_str()),
        JournalEvent::ChildResult { child, result } => {
            let output = result["output"].as_str().unwrap_or_default();
            let reason = result["stop_reason"].as_str().unwrap_or("?");
            format!("result of {child} ({reason}): {output}")
        }
        JournalEvent::SpawnRefused { error } => format!("spawn refused: {error}"),
        JournalEvent::WorkspaceSnapshot(snapshot) => match snapshot.changed {
            Some(n) => format!("files checkpointed: {n} paths changed"),
            None => "files stored".to_owned(),
        },
    };
    Some(format!("#{:<4} {text}", event.seq))
}

/// The session's record; a one-line error naming the cluster when it has none.
pub(crate) async fn record_of(
    registry: &RegistryClient,
    session: &SessionId,
    g: &Global,
) -> Result<SessionRecord, ControlError> {
    registry
        .session(session.clone(), Consistency::Linearizable)
        .await
        .map_err(registry_error)?
        .ok_or_else(|| {
            ControlError::new(
                ErrorCode::NotFound,
                format!(
                    "session {session} is not in the registry of cluster {}; check the id \
                     (lineage ls lists the sessions) and --cluster",
                    cluster(g)
                ),
            )
        })
}

fn print(events: &[SessionEvent], json: bool) {
    for event in events {
        if json {
            match serde_json::to_string(event) {
                Ok(line) => println!("{line}"),
                Err(e) => eprintln!("warning: event {} not printable: {e}", event.seq),
            }
        } else if let Some(line) = transcript_line(event) {
            println!("{line}");
        }
    }
}

/// How a session's first turn ended (`lineage spawn --wait`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct FirstTurn {
    /// How it ended.
    pub stop_reason: StopReason,
    /// Why, when it did not complete.
    pub error: Option<String>,
    /// Its reply, when it gave one.
    pub reply: Option<String>,
}

/// The first turn's end in `events`, once it is there.
pub(crate) fn first_turn_of(events: &[SessionEvent]) -> Option<FirstTurn> {
    let mut reply = None;
    for event in events {
        match JournalEvent::from_parts(&event.kind, &event.data) {
            Ok(Some(JournalEvent::TurnAssistant { text })) => reply = Some(text),
            Ok(Some(JournalEvent::TurnEnd {
                index: 0,
                stop_reason,
                error,
            })) => {
                return Some(FirstTurn {
                    stop_reason,
                    error,
                    reply,
                })
            }
            _ => {}
        }
    }
    None
}

/// Waits for `session`'s first turn to end (reading its log as `-f` does; Ctrl-C stops).
pub(crate) async fn first_turn(g: &Global, session: &SessionId) -> Result<FirstTurn, ControlError> {
    let logs = EventLogStore::reader(connect(g).await?, subjects(g)?);
    let mut seen: Vec<SessionEvent> = Vec::new();
    let mut cursor = LogCursor::default();
    let wait = async {
        loop {
            let (events, next) = logs
                .read_after(session, cursor)
                .await
                .map_err(ControlError::from)?;
            seen.extend(events);
            cursor = next;
            if let Some(turn) = first_turn_of(&seen) {
                return Ok(turn);
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
        }
    };
    tokio::select! {
        outcome = wait => outcome,
        () = crate::client::wait_for_signal() => Err(ControlError::new(
            ErrorCode::Unavailable,
            format!("stopped waiting; the session {session} runs on (lineage logs -f {session} follows it)"),
        )),
    }
}

/// Prints the transcript; with `-f`, follows it.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let session = parse_session("session", &args.session)?;
    let nats = connect(g).await?;
    let registry = RegistryClient::new(nats.clone(), cluster(g));
    let mut record = record_of(&registry, &session, g).await?;
    let logs = EventLogStore::reader(nats, subjects(g)?);
    let (events, mut cursor) = logs.read(&session).await.map_err(ControlError::from)?;
    print(&events, g.json);
    if !args.follow {
        return Ok(());
    }
    let follow = async {
        let mut reads: u64 = 0;
        loop {
            if record.state == SessionState::Disposed {
                // What it wrote before it was disposed is in the log already.
                let (events, _) = logs
                    .read_after(&session, cursor)
                    .await
                    .map_err(ControlError::from)?;
                print(&events, g.json);
                return Ok(());
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
            let (events, next): (Vec<SessionEvent>, LogCursor) = logs
                .read_after(&session, cursor)
                .await
                .map_err(ControlError::from)?;
            print(&events, g.json);
            cursor = next;
            reads += 1;
            // The registry is asked less often than the log is read.
            if reads.is_multiple_of(5) {
                record = record_of(&registry, &session, g).await?;
            }
        }
    };
    tokio::select! {
        outcome = follow => outcome,
        () = crate::client::wait_for_signal() => Ok(()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A log event (for this module's tests and `show`'s).
    pub(crate) fn event(seq: u64, kind: &str, data: serde_json::Value) -> SessionEvent {
        SessionEvent {
            seq,
            kind: kind.into(),
            data,
            at_ms: 1,
        }
    }

    #[test]
    fn a_transcript_reads_as_the_turns_went() {
        let child = "01936c1e-7a3b-7cde-8f00-00000000beef";
        let lines: Vec<String> = [
            event(1, "subagent/descriptor", json!({"provider": "script"})),
            event(
                2,
                "inbox/accepted",
                json!({"message": {"kind": "user", "content": "go"}, "wake": true}),
            ),
            event(3, "turn/start", json!({"index": 0, "inputs": [2]})),
            event(4, "turn/user", json!({"text": "go"})),
            event(
                5,
                "subagent/spawned",
                json!({"child": child, "shape": "continuable", "node": "node-2", "run": null}),
            ),
            event(
                6,
                "outbox/report",
                json!({"seq": 1, "content": "half", "delivery": "quiet"}),
            ),
            event(7, "turn/assistant", json!({"text": "done"})),
            event(
                8,
                "turn/end",
                json!({"index": 0, "stop_reason": "completed"}),
            ),
            event(
                9,
                "turn/end",
                json!({"index": 1, "stop_reason": "failed", "error": "the model went away"}),
            ),
            event(
                10,
                "outbox/settled",
                json!({"seq": 2, "stop_reason": "completed", "summary": "all done"}),
            ),
            event(11, "turn/end", json!({"index": "not a number"})),
        ]
        .iter()
        .filter_map(transcript_line)
        .collect();
        assert_eq!(
            lines,
            [
                "#3    ── turn 0",
                "#4    user: go",
                &format!("#5    spawned {child} (continuable) on node-2"),
                "#6    report (quiet) sent: half",
                "#7    assistant: done",
                "#8    ── turn 0 completed",
                "#9    ── turn 1 failed: the model went away",
                "#10   settled (completed): all done",
            ]
        );
    }
}
