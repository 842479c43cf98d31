//! `lineage bench resume`: cold resume of settled continuable children on another node.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lineage_bus::control::ControlError;
use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::SessionId;
use lineage_core::messages::InboxMessage;
use lineage_protocol::control::ResumeOutcome;

use crate::bench::{concurrent, Samples};

use super::{internal, replies, scaled, spawn_request, Arrivals, Bench};

/// `resume`: cold resume of continuable children with a 100-event log.
pub(super) async fn resume(b: &Bench) -> Result<(), ControlError> {
    const LOG_EVENTS: usize = 100;
    let (pn, cn, rn) = (b.node(0).clone(), b.node(1).clone(), b.node(2).clone());
    let parent = b.root(&pn).await?;
    let mut arrivals =
        Arrivals::subscribe(&b.ctl.client, &[b.ctl.subjects.parent_inbox(&parent)]).await?;
    let events =
        lineage_bus::events::EventLogStore::open(b.ctl.client.clone(), b.ctl.subjects.clone())
            .await
            .map_err(ControlError::from)?;
    let mut settled: HashSet<String> = HashSet::new();
    // Calibrate: how many events a one-reply child logs, so the real ones hold exactly 100.
    let probe = b
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
    wait_settled(&mut arrivals, &mut settled, &[probe.session.to_string()]).await?;
    let base = events
        .read(&probe.session)
        .await
        .map_err(ControlError::from)?
        .0
        .len();
    let reply_steps = (LOG_EVENTS + 1).saturating_sub(base).max(1);
    // Build the children: continuable, on node 2, one turn of `reply_steps` replies, settled.
    let n = scaled(200);
    let children: Arc<Mutex<Vec<SessionId>>> = Arc::default();
    let build = Instant::now();
    concurrent(n, 8, {
        let ctl = b.ctl.clone();
        let children = children.clone();
        let (parent, pn, cn) = (parent.clone(), pn.clone(), cn.clone());
        move |_| {
            let ctl = ctl.clone();
            let children = children.clone();
            let request = spawn_request(
                Some(&parent),
                Some(SubagentShape::Continuable),
                replies(reply_steps),
                &cn,
            );
            let pn = pn.clone();
            async move {
                let reply = ctl.spawn(&pn, &request).await?;
                if let Ok(mut c) = children.lock() {
                    c.push(reply.session);
                }
                Ok(())
            }
        }
    })
    .await?;
    let children: Vec<SessionId> = children.lock().map(|c| c.clone()).unwrap_or_default();
    let ids: Vec<String> = children.iter().map(|c| c.to_string()).collect();
    wait_settled(&mut arrivals, &mut settled, &ids).await?;
    let first = children.first().ok_or_else(|| internal("no child built"))?;
    let logged = events
        .read(first)
        .await
        .map_err(ControlError::from)?
        .0
        .len();
    println!(
        "built {} settled (cold) continuable children on {cn} in {:.1?}, {logged} log events each; resuming each on {rn} with `resume`",
        children.len(),
        build.elapsed()
    );
    // For comparison: the log read alone (what every resume does first), from this process.
    let mut reads = Vec::new();
    let start = Instant::now();
    for child in children.iter().take(scaled(50)) {
        let t = Instant::now();
        events.read(child).await.map_err(ControlError::from)?;
        reads.push(t.elapsed());
    }
    b.report(
        &format!("  (read a {logged}-event log alone)"),
        &Samples {
            latencies: reads,
            wall: start.elapsed(),
        },
    );
    // Resume each, one at a time, on node 3.
    let mut latencies = Vec::with_capacity(children.len());
    let start = Instant::now();
    for child in &children {
        let t = Instant::now();
        let reply = b.ctl.control.on(&rn).resume(child.clone()).await?;
        latencies.push(t.elapsed());
        if reply.outcome != ResumeOutcome::Resumed {
            return Err(internal(format!(
                "child {child} was not cold: {:?}",
                reply.outcome
            )));
        }
    }
    b.report(
        &format!("cold resume, {logged}-event log"),
        &Samples {
            latencies,
            wall: start.elapsed(),
        },
    );
    Ok(())
}

/// Waits until every child in `children` sent its settlement notice (seen on the inbox subject).
pub(super) async fn wait_settled(
    arrivals: &mut Arrivals,
    settled: &mut HashSet<String>,
    children: &[String],
) -> Result<(), ControlError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let missing = children.iter().filter(|c| !settled.contains(*c)).count();
        if missing == 0 {
            return Ok(());
        }
        let Some((_, msg, _)) = arrivals.next(deadline).await else {
            return Err(internal(format!(
                "{missing} children did not settle within 120 s"
            )));
        };
        if let Ok(InboxMessage::Settled(s)) = InboxMessage::decode(&msg.payload) {
            settled.insert(s.sender_session_id.to_string());
        }
    }
}
