//! `lineage watch`: start, end, report and settled events of a parent's children (E1, M1, M2).

use futures::StreamExt;
use lineage_bus::control::{ControlError, ErrorCode};
use serde_json::json;

use crate::client::{connect, parse_session};
use crate::global::subjects;
use crate::global::Global;

/// `watch` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The parent session.
    pub parent: String,
    /// Stop after this many events (default: run until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
}

/// Subscribes to the parent's lifecycle and inbox subjects and prints each message.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let count = args.count;
    let parent = parse_session("parent", &args.parent)?;
    let client = connect(g).await?;
    let subjects = subjects(g)?;
    let subject = format!("lineage.{}.parent.{parent}.*", subjects.cluster());
    let mut sub = client.subscribe(subject.clone()).await.map_err(|e| {
        ControlError::new(
            ErrorCode::Unavailable,
            format!("cannot subscribe to {subject}: {e}"),
        )
    })?;
    if !g.json {
        eprintln!("watching {subject} (Ctrl-C to stop)");
    }
    let mut seen = 0u64;
    loop {
        let msg = tokio::select! {
            m = sub.next() => m,
            _ = crate::client::wait_for_signal() => None,
        };
        let Some(msg) = msg else { break };
        let kind = msg.subject.rsplit('.').next().unwrap_or("?").to_owned();
        let body: serde_json::Value = serde_json::from_slice(&msg.payload)
            .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&msg.payload)}));
        if g.json {
            println!(
                "{}",
                json!({"subject": msg.subject.as_str(), "event": body})
            );
        } else {
            let (what, who, detail) = describe_event(&kind, &body);
            println!("{what:18} {who}  {detail}");
        }
        seen += 1;
        if count.is_some_and(|c| seen >= c) {
            break;
        }
    }
    Ok(())
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
