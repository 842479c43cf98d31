//! `lineage bench settle`: a settlement's delivery from a child to its parent on another node.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lineage_bus::control::ControlError;
use lineage_core::descriptor::SubagentShape;
use lineage_core::messages::{InboxMessage, LifecycleEvent};

use crate::bench::Samples;

use super::{internal, replies, scaled, spawn_request, Arrivals, Bench};

/// `settle`: settlement delivery from a child on node 2 to its parent on node 1.
pub(super) async fn settle(b: &Bench) -> Result<(), ControlError> {
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    let parent = b.root(&pn).await?;
    let subjects = &b.ctl.subjects;
    let mut arrivals = Arrivals::subscribe(
        &b.ctl.client,
        &[
            subjects.parent_end(&parent),
            subjects.parent_inbox(&parent),
            subjects.session_events(&parent),
        ],
    )
    .await?;
    println!("continuable child on {cn} (one turn, then it settles) of a top-level parent on {pn}; clock: arrivals at the bench process, from the child's subagent/end (published right after the settle commit)");
    let n = scaled(200) + 5;
    let mut published = Vec::new();
    let mut accepted = Vec::new();
    let mut seen: HashMap<String, [Option<Instant>; 3]> = HashMap::new();
    let start = Instant::now();
    for i in 0..n {
        let reply = b
            .ctl
            .spawn(
                &pn,
                &spawn_request(
                    Some(&parent),
                    Some(SubagentShape::Continuable),
                    replies(1),
                    &cn,
                ),
            )
            .await?;
        let child = reply.session.to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some([Some(end), Some(inbox), Some(acc)]) = seen.get(&child).copied() {
                // The first five are a warm-up.
                if i >= 5 {
                    published.push(inbox.saturating_duration_since(end));
                    accepted.push(acc.saturating_duration_since(end));
                }
                break;
            }
            let Some((which, msg, at)) = arrivals.next(deadline).await else {
                return Err(internal(format!(
                    "child {child}: settlement not seen within 20 s (end, inbox, accepted: {:?})",
                    seen.get(&child)
                )));
            };
            let sender = match which {
                0 => match LifecycleEvent::decode(&msg.payload) {
                    Ok(LifecycleEvent::End(e)) => Some(e.child_id.to_string()),
                    _ => None,
                },
                1 => match InboxMessage::decode(&msg.payload) {
                    Ok(InboxMessage::Settled(s)) => Some(s.sender_session_id.to_string()),
                    _ => None,
                },
                _ => accepted_sender(&msg.payload),
            };
            if let Some(sender) = sender {
                seen.entry(sender).or_default()[which] = Some(at);
            }
        }
    }
    let wall = start.elapsed();
    b.report(
        "settle: notice on parent inbox subj",
        &Samples {
            latencies: published,
            wall,
        },
    );
    b.report(
        "settle: notice accepted by parent",
        &Samples {
            latencies: accepted,
            wall,
        },
    );
    println!(
        "(throughput above: one child at a time, spawn included; latencies exclude the spawn)"
    );
    Ok(())
}

/// The sender of a settlement notice a parent accepted into its log (`inbox/accepted`).
pub(super) fn accepted_sender(payload: &[u8]) -> Option<String> {
    let events = lineage_bus::events::decode_log_message(payload).ok()?;
    let event = events.iter().find(|e| e.kind == "inbox/accepted")?;
    let data = &event.data;
    if data.get("message")?.get("kind")?.as_str()? != "subagent-settled" {
        return None;
    }
    let dedup = data.get("dedup_id")?.as_str()?;
    dedup.rsplit_once('-').map(|(sender, _)| sender.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_sender_reads_the_dedup_id_of_a_settled_notice() {
        let event = serde_json::json!({
            "seq": 4, "kind": "inbox/accepted", "at_ms": 1,
            "data": {"message": {"kind": "subagent-settled", "sender_session_id": "x", "summary": "s"},
                     "wake": true, "dedup_id": "01936c1e-7a3b-7cde-8f00-000000000001-1"}
        });
        assert_eq!(
            accepted_sender(event.to_string().as_bytes()).as_deref(),
            Some("01936c1e-7a3b-7cde-8f00-000000000001")
        );
        let other = serde_json::json!({"seq": 5, "kind": "turn/start", "at_ms": 1, "data": {}});
        assert_eq!(accepted_sender(other.to_string().as_bytes()), None);
    }
}
