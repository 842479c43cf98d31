//! `lineage watch`: start, end, report and settled events of a parent's children (E1, M1, M2;
//! issue 37).
//!
//! It replays first, then follows: the children's starts (from the parent's event log,
//! `subagent/spawned`) and the reports and settlements they sent (from the inbox stream, as
//! published), oldest first, or only those younger than `--since`; then what is published
//! while it runs (a message seen in the replay is not printed twice). A child's end is live
//! only: its settlement says how it ended. It exits when the parent is disposed (after what
//! was published before), after `--count` events, or on Ctrl-C; an unknown parent, or a
//! cluster that does not answer, is one line at once.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::events::EventLogStore;
use lineage_core::journal::JournalEvent;
use lineage_registry::{RegistryClient, SessionState};
use serde_json::{json, Value};

use crate::client::{connect, now_ms, parse_session};
use crate::global::{cluster, subjects, Global};
use crate::output::usage;

/// `watch` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The parent session.
    pub parent: String,
    /// Stop after this many events, replayed ones included (default: until the parent is
    /// disposed, or Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
    /// Replay only what is younger than this (e.g. `90s`, `10m`, `2h`); `0s` replays nothing.
    #[arg(long, value_name = "AGE")]
    pub since: Option<String>,
}

/// How often the parent's record is read again (to stop once it is disposed).
const PARENT_EVERY: Duration = Duration::from_secs(2);

/// What makes a message the same one in the replay and live: a start's run, an inbox
/// message's kind, sender and seq.
fn replay_key(body: &Value) -> Option<String> {
    if body["event"] == "subagent/start" {
        return Some(format!("start {}", body["run_id"].as_str()?));
    }
    let kind = body["kind"].as_str()?;
    Some(format!(
        "{kind} {} {}",
        body["sender_session_id"].as_str()?,
        body["seq"].as_u64()?
    ))
}

/// The replay: starts from the parent's log, inbox messages as published, merged by time.
async fn replay(
    g: &Global,
    nats: &async_nats::Client,
    parent: &lineage_core::ids::SessionId,
) -> Result<Vec<(String, Value)>, ControlError> {
    let subjects = subjects(g)?;
    let logs = EventLogStore::reader(nats.clone(), subjects.clone());
    let (events, _) = logs.read(parent).await.map_err(ControlError::from)?;
    let mut out: Vec<(String, Value)> = events
        .iter()
        .filter_map(|e| match JournalEvent::from_parts(&e.kind, &e.data) {
            Ok(Some(JournalEvent::Spawned {
                child,
                shape,
                node,
                run,
                ..
            })) => Some((
                "start".to_owned(),
                json!({"event": "subagent/start", "child_id": child, "shape": shape.as_str(),
                       "node": node, "run_id": run, "parent_session_id": parent,
                       "at_ms": e.at_ms, "replayed": true}),
            )),
            _ => None,
        })
        .collect();
    let inbox = lineage_bus::inbox::history(nats, &subjects, parent)
        .await
        .map_err(ControlError::from)?;
    out.extend(inbox.iter().map(|payload| {
        let body: Value = serde_json::from_slice(payload)
            .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(payload)}));
        ("inbox".to_owned(), body)
    }));
    out.sort_by_key(|(_, body)| body["at_ms"].as_u64().unwrap_or(0));
    Ok(out)
}

/// Prints one event; returns whether `--count` is reached.
fn print_event(
    g: &Global,
    subject_kind: &str,
    subject: &str,
    body: &Value,
    seen: &mut u64,
    count: Option<u64>,
) -> bool {
    if g.json {
        println!("{}", json!({"subject": subject, "event": body}));
    } else {
        let (what, who, detail) = describe_event(subject_kind, body);
        println!("{what:18} {who}  {detail}");
    }
    *seen += 1;
    count.is_some_and(|c| *seen >= c)
}

/// Replays, then follows the parent's lifecycle and inbox subjects.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let count = args.count;
    let since_ms = args
        .since
        .as_deref()
        .map(super::ls::parse_age)
        .transpose()
        .map_err(|e| usage(format!("--since: {e}")))?;
    let parent = parse_session("parent", &args.parent)?;
    let nats = connect(g).await?;
    let registry = RegistryClient::new(nats.clone(), cluster(g));
    let mut record = super::logs::record_of(&registry, &parent, g).await?;
    let subject = format!("lineage.{}.parent.{parent}.*", cluster(g));
    // Live first, so nothing published during the replay is missed.
    let mut sub = nats.subscribe(subject.clone()).await.map_err(|e| {
        ControlError::new(
            ErrorCode::Unavailable,
            format!("cannot subscribe to {subject}: {e}"),
        )
    })?;
    if !g.json {
        eprintln!("watching {subject} (Ctrl-C to stop)");
    }
    let mut seen = 0u64;
    let mut replayed: HashSet<String> = HashSet::new();
    let from_ms = since_ms.map(|age| now_ms().saturating_sub(age));
    for (kind, body) in replay(g, &nats, &parent).await? {
        if let Some(key) = replay_key(&body) {
            replayed.insert(key);
        }
        if from_ms.is_some_and(|from| body["at_ms"].as_u64().unwrap_or(0) < from) {
            continue;
        }
        let subject = format!("lineage.{}.parent.{parent}.{kind}", cluster(g));
        if print_event(g, &kind, &subject, &body, &mut seen, count) {
            return Ok(());
        }
    }
    let mut tick = tokio::time::interval(PARENT_EVERY);
    tick.tick().await;
    loop {
        if record.state == SessionState::Disposed {
            // What was published before it was disposed, then stop.
            while let Ok(Some(msg)) =
                tokio::time::timeout(Duration::from_millis(300), sub.next()).await
            {
                if show_live(g, &msg, &mut replayed, &mut seen, count) {
                    return Ok(());
                }
            }
            if !g.json {
                eprintln!("{parent} is disposed; nothing more will come");
            }
            return Ok(());
        }
        tokio::select! {
            msg = sub.next() => {
                let Some(msg) = msg else { return Ok(()) };
                if show_live(g, &msg, &mut replayed, &mut seen, count) {
                    return Ok(());
                }
            }
            _ = tick.tick() => {
                record = super::logs::record_of(&registry, &parent, g).await?;
            }
            () = crate::client::wait_for_signal() => return Ok(()),
        }
    }
}

/// Prints a live message unless the replay printed it; returns whether `--count` is reached.
fn show_live(
    g: &Global,
    msg: &async_nats::Message,
    replayed: &mut HashSet<String>,
    seen: &mut u64,
    count: Option<u64>,
) -> bool {
    let kind = msg.subject.rsplit('.').next().unwrap_or("?").to_owned();
    let body: Value = serde_json::from_slice(&msg.payload)
        .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&msg.payload)}));
    if replay_key(&body).is_some_and(|key| replayed.remove(&key)) {
        return false;
    }
    print_event(g, &kind, msg.subject.as_str(), &body, seen, count)
}

/// One watched message as (what, who, detail): the event or kind, the child, and its content,
/// summary, stop reason or node. Shared by `watch` and the demo.
pub(crate) fn describe_event(
    subject_kind: &str,
    body: &serde_json::Value,
) -> (String, String, String) {
    let text = |v: &serde_json::Value| {
        v.as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string())
    };
    let what = body
        .get("event")
        .or_else(|| body.get("kind"))
        .and_then(|v| v.as_str())
        .unwrap_or(subject_kind)
        .to_owned();
    let who = body
        .get("child_id")
        .or_else(|| body.get("sender_session_id"))
        .map(text)
        .unwrap_or_else(|| "-".to_owned());
    let detail = body
        .get("content")
        .or_else(|| body.get("summary"))
        .or_else(|| body.get("stop_reason"))
        .or_else(|| body.get("node"))
        .map(text)
        .unwrap_or_default();
    (what, who, detail)
}
