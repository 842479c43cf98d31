//! Where one registry write's time goes (a diagnostic pass after the timed phases, not a
//! figure of the table; it needs the voters' Raft RPCs on NATS, `lineage dev --raft-over-nats`): the bench subscribes to every `lineage.<cluster>.>` and `_INBOX.>`
//! message and stamps each on arrival with one clock, then makes sequential writes from one
//! client. For each write it finds: the client's request (`registry.<leader>.write`), the
//! leader's first append-entries carrying entries (`raft.<follower>.append`, not a heartbeat),
//! the first follower's answer to it (the append's reply subject) and the answer to the client
//! (the request's reply subject), and prints the medians of the three segments between them.
//! Each arrival is one more hop through nats-server to the bench, the same for every message,
//! so the differences are the path's own.

use std::time::{Duration, Instant};

use lineage_registry::bench::RegisterBench;
use lineage_registry::subjects::RaftRpc;

use super::super::{Arrivals, Bench};

/// One write's marks: request, first append, first follower ack, reply (arrival times).
struct Marks {
    request: Instant,
    append: Instant,
    ack: Instant,
    reply: Instant,
}

/// Sequential writes with the message timeline; prints the medians.
pub(super) async fn registry_write(
    b: &Bench,
    work: &RegisterBench,
    cluster: &str,
    writes: usize,
) -> Result<(), String> {
    let subjects = [format!("lineage.{cluster}.>"), "_INBOX.>".to_owned()];
    let mut arrivals = Arrivals::subscribe(&b.ctl.client, &subjects)
        .await
        .map_err(|e| e.to_string())?;
    let mut marks = Vec::with_capacity(writes);
    let mut client_side = Vec::with_capacity(writes);
    for _ in 0..writes {
        // Drop what arrived between writes (heartbeats, the last write's stragglers).
        while arrivals.next(Instant::now()).await.is_some() {}
        let batch = work
            .run_batch(1, 1)
            .await
            .map_err(|e| format!("registry write: {e}"))?;
        client_side.extend(batch.latencies);
        let mut seen = Vec::new();
        let until = Instant::now() + Duration::from_millis(20);
        while let Some((_, msg, at)) = arrivals.next(until).await {
            seen.push((msg, at));
        }
        if let Some(m) = marks_of(&seen) {
            marks.push(m);
        }
    }
    if marks.is_empty() {
        return Err("no write's messages could be matched (voters on direct Raft links, [registry.direct], send no append-entries through NATS: run it on a cluster started with lineage dev --raft-over-nats and --nats)".into());
    }
    let median = |f: &dyn Fn(&Marks) -> Duration| {
        let mut v: Vec<Duration> = marks.iter().map(f).collect();
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1000.0
    };
    client_side.sort();
    let client = client_side[client_side.len() / 2].as_secs_f64() * 1000.0;
    println!(
        "registry write, 1 client, where the time goes ({} of {writes} writes matched; medians, from the arrival times of the write's NATS messages at the bench): request -> leader's first append with entries {:.3} ms; append -> first follower's ack {:.3} ms; ack -> reply to the client {:.3} ms; request -> reply {:.3} ms (the client saw {client:.3} ms, the bench's subscription to every message included)",
        marks.len(),
        median(&|m| m.append.saturating_duration_since(m.request)),
        median(&|m| m.ack.saturating_duration_since(m.append)),
        median(&|m| m.reply.saturating_duration_since(m.ack)),
        median(&|m| m.reply.saturating_duration_since(m.request)),
    );
    Ok(())
}

/// The marks of one write among the messages that arrived during it, in arrival order.
fn marks_of(seen: &[(async_nats::Message, Instant)]) -> Option<Marks> {
    let is_write = |s: &str| s.contains(".registry.") && s.contains(".write");
    let (request, at_request) = seen.iter().find(|(m, _)| is_write(m.subject.as_str()))?;
    let reply_to = request.reply.as_ref()?.as_str();
    let appends: Vec<&(async_nats::Message, Instant)> = seen
        .iter()
        .filter(|(m, at)| {
            at >= at_request
                && m.subject
                    .as_str()
                    .ends_with(&format!(".{}", RaftRpc::Append.token()))
                && !m.payload.windows(13).any(|w| w == b"\"entries\":[]")
        })
        .collect();
    let (_, at_append) = appends.first()?;
    let ack_subjects: Vec<&str> = appends
        .iter()
        .filter_map(|(m, _)| m.reply.as_ref().map(|r| r.as_str()))
        .collect();
    let (_, at_ack) = seen
        .iter()
        .find(|(m, at)| at >= at_append && ack_subjects.contains(&m.subject.as_str()))?;
    let (_, at_reply) = seen
        .iter()
        .find(|(m, at)| at >= at_request && m.subject.as_str() == reply_to)?;
    Some(Marks {
        request: *at_request,
        append: *at_append,
        ack: *at_ack,
        reply: *at_reply,
    })
}
