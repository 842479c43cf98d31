//! `lineage show <id>` (issue 37): one session at a glance, as `temporal workflow describe`
//! shows a workflow: its state (and whether a turn runs now), shape, label, node, parent and
//! root, its turns and how the last one ended, its usage, its last reply and its last reports.
//! The record comes from the registry, the rest from its event log ([`glance`], a pure
//! function of the log). `--json`: the record and the glance.

use lineage_bus::control::ControlError;
use lineage_bus::events::EventLogStore;
use lineage_core::journal::JournalEvent;
use lineage_core::log::SessionEvent;
use lineage_core::messages::StopReason;
use lineage_registry::listing::label_of;
use lineage_registry::RegistryClient;
use serde::Serialize;
use serde_json::json;

use super::logs::record_of;
use crate::client::{connect, parse_session, print_json};
use crate::global::{cluster, subjects, Global};

/// `show` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    pub session: String,
}

/// How many of the last reports `show` prints.
const LAST_REPORTS: usize = 3;

/// What a session's log says of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Glance {
    /// Turns begun.
    pub turns: u64,
    /// Whether a turn has begun and not ended.
    pub in_turn: bool,
    /// How the last turn that ended ended, and why when it did not complete.
    pub last_stop: Option<(StopReason, Option<String>)>,
    /// The last reply.
    pub last_reply: Option<String>,
    /// The last reports it sent (oldest first, at most [`LAST_REPORTS`]).
    pub reports: Vec<String>,
    /// The settlement it sent, if it settled: stop reason and summary.
    pub settled: Option<(StopReason, String)>,
}

/// Folds a session's log into a [`Glance`].
pub(crate) fn glance(events: &[SessionEvent]) -> Glance {
    let mut g = Glance::default();
    for event in events {
        let Ok(Some(journal)) = JournalEvent::from_parts(&event.kind, &event.data) else {
            continue;
        };
        match journal {
            JournalEvent::TurnStart { .. } => {
                g.turns += 1;
                g.in_turn = true;
            }
            JournalEvent::TurnEnd {
                stop_reason, error, ..
            } => {
                g.in_turn = false;
                g.last_stop = Some((stop_reason, error));
            }
            JournalEvent::TurnAssistant { text } => g.last_reply = Some(text),
            JournalEvent::ReportSent { content, .. } => {
                g.reports.push(content);
                if g.reports.len() > LAST_REPORTS {
                    g.reports.remove(0);
                }
            }
            JournalEvent::SettledSent {
                stop_reason,
                summary,
                ..
            } => g.settled = Some((stop_reason, summary)),
            JournalEvent::Accepted(_)
            | JournalEvent::TurnInputs { .. }
            | JournalEvent::TurnUser { .. }
            | JournalEvent::Spawned { .. }
            | JournalEvent::ChildResult { .. }
            | JournalEvent::SpawnRefused { .. }
            | JournalEvent::WorkspaceSnapshot(_)
            | JournalEvent::DriverState(_) => {}
        }
    }
    g
}

/// Prints the session.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let session = parse_session("session", &args.session)?;
    let nats = connect(g).await?;
    let registry = RegistryClient::new(nats.clone(), cluster(g));
    let record = record_of(&registry, &session, g).await?;
    let logs = EventLogStore::reader(nats, subjects(g)?);
    let (events, _) = logs.read(&session).await.map_err(ControlError::from)?;
    let seen = glance(&events);
    if g.json {
        print_json(&json!({"record": record, "glance": seen}));
        return Ok(());
    }
    let activity = match (record.state.as_str(), seen.in_turn) {
        (state @ ("running" | "waiting"), true) => format!("{state}, in a turn"),
        (state @ ("running" | "waiting"), false) => format!("{state}, idle"),
        (state, _) => match record.stop_reason {
            Some(stop) => format!("{state} ({})", stop.as_str()),
            None => state.to_owned(),
        },
    };
    let mut rows: Vec<(&str, String)> = vec![
        ("session", session.to_string()),
        ("state", activity),
        ("shape", super::tree::shape_of(&record)),
        (
            "label",
            label_of(&record)
                .map(|l| l.into_owned())
                .unwrap_or("-".into()),
        ),
        (
            "node",
            record
                .placement
                .as_ref()
                .map(|p| format!("{}@{}", p.node, p.epoch))
                .unwrap_or("-".into()),
        ),
        (
            "parent",
            record
                .header
                .parent_session()
                .map(ToString::to_string)
                .unwrap_or("-".into()),
        ),
        ("root", record.header.root_session().to_string()),
    ];
    let last = match &seen.last_stop {
        Some((reason, Some(error))) => format!(" (last {}: {error})", reason.as_str()),
        Some((reason, None)) => format!(" (last {})", reason.as_str()),
        None => String::new(),
    };
    rows.push(("turns", format!("{}{last}", seen.turns)));
    if let Some((reason, summary)) = &seen.settled {
        rows.push(("settled", format!("{}: {summary}", reason.as_str())));
    }
    if let Some(usage) = &record.usage {
        let window = usage
            .size_tokens
            .map(|n| format!(" of {n}"))
            .unwrap_or_default();
        let cost = match (usage.cost_micros, &usage.currency) {
            (Some(micros), Some(currency)) => {
                format!(", {:.4} {currency}", micros as f64 / 1_000_000.0)
            }
            _ => String::new(),
        };
        rows.push((
            "usage",
            format!("{} tokens in context{window}{cost}", usage.used_tokens),
        ));
    }
    rows.push(("reply", seen.last_reply.clone().unwrap_or("-".into())));
    for (name, value) in rows {
        println!("{name:<9} {value}");
    }
    for (i, report) in seen.reports.iter().enumerate() {
        let name = if i == 0 { "reports" } else { "" };
        println!("{name:<9} - {report}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::logs::tests::event;
    use serde_json::json;

    #[test]
    fn a_glance_says_whether_a_turn_runs_and_how_the_last_ended() {
        let mut log = vec![
            event(1, "turn/start", json!({"index": 0, "inputs": []})),
            event(
                2,
                "outbox/report",
                json!({"seq": 1, "content": "r1", "delivery": "quiet"}),
            ),
            event(3, "turn/assistant", json!({"text": "first"})),
            event(
                4,
                "turn/end",
                json!({"index": 0, "stop_reason": "completed"}),
            ),
        ];
        let seen = glance(&log);
        assert_eq!(seen.turns, 1);
        assert!(!seen.in_turn);
        assert_eq!(seen.last_stop, Some((StopReason::Completed, None)));
        assert_eq!(seen.last_reply.as_deref(), Some("first"));
        for (i, r) in ["r2", "r3", "r4"].iter().enumerate() {
            log.push(event(
                5 + i as u64,
                "outbox/report",
                json!({"seq": 2 + i, "content": r, "delivery": "wakeup"}),
            ));
        }
        log.push(event(8, "turn/start", json!({"index": 1, "inputs": []})));
        let seen = glance(&log);
        assert!(seen.in_turn, "a turn began and has not ended");
        assert_eq!(seen.turns, 2);
        assert_eq!(seen.reports, ["r2", "r3", "r4"], "the last three");
        log.push(event(
            9,
            "turn/end",
            json!({"index": 1, "stop_reason": "failed", "error": "boom"}),
        ));
        log.push(event(
            10,
            "outbox/settled",
            json!({"seq": 5, "stop_reason": "failed", "summary": "it broke"}),
        ));
        let seen = glance(&log);
        assert_eq!(
            seen.last_stop,
            Some((StopReason::Failed, Some("boom".into())))
        );
        assert_eq!(seen.settled, Some((StopReason::Failed, "it broke".into())));
        assert_eq!(seen.last_reply.as_deref(), Some("first"));
    }
}
