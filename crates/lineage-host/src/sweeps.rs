//! The host's background loops, started by [`crate::host::Host::start`]: the lease heartbeat
//! (and the placement check after a lapse, [`crate::fence`]), the same check once per lease
//! (a reconcile of the live agents with their records), the birth sweeper (S1,
//! [`crate::births`]), the deadline, budget and retention sweeps on one tick (Q2, Q3, Q5:
//! [`crate::deadlines`], [`crate::budgets`], [`crate::retention`]) and, when configured, the
//! takeover of dead nodes' sessions (K1, [`crate::readopt`]). Each runs every period until
//! shutdown; all but the heartbeat also stop when the node winds down
//! ([`crate::handoff`]): a stopping node starts no new work.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lineage_registry::types::Command;

use crate::error::HostError;
use crate::shared::Shared;

/// Writes the first heartbeat, then starts every loop.
pub(crate) async fn start(shared: &Arc<Shared>) -> Result<(), HostError> {
    let first = heartbeat(shared).await?;
    shared.hold_lease_until(first.until_ms);
    every(
        shared,
        shared.cfg.heartbeat_every,
        false,
        |beat| async move {
            match heartbeat(&beat).await {
                Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
                Ok(renewal) if renewal.lapsed => {
                    let (stopped, all_checked) = beat.fence_moved().await;
                    tracing::info!(
                        stopped = stopped.len(),
                        all_checked,
                        "lease renewed after a lapse; placements checked"
                    );
                    // Inbox readers take messages again only once every stale agent stopped.
                    match all_checked {
                        true => beat.hold_lease_until(renewal.until_ms),
                        false => beat.check_again_at_next_renewal(),
                    }
                }
                Ok(renewal) => beat.hold_lease_until(renewal.until_ms),
            }
        },
    );
    // S1: births no node started in time are disposed (and their parents told).
    let lease = shared.cfg.lease.max(Duration::from_millis(500));
    every(shared, lease, true, |births| async move {
        match births.sweep_births().await {
            Ok(r) if r.expired.is_empty() && r.failed.is_empty() => {}
            Ok(r) => tracing::info!(
                expired = r.expired.len(),
                failed = r.failed.len(),
                "swept births that never started"
            ),
            Err(e) => tracing::warn!(error = %e, "birth sweep failed"),
        }
    });
    // K1, X1, a reconcile: every live agent's record is read once per lease, not only after a
    // lapse. An agent whose session was disposed or moved while this node held its lease stops,
    // as after a lapse: a birth whose `start` answered after the parent's node had given up and
    // disposed it (issue 12, `lineage chaos` seed 24; CI's seed 12 found one still live and
    // idle 15 s later), a drain that disposed it in the registry alone. One registry read per
    // live agent per lease.
    every(shared, lease, true, |reconcile| async move {
        let (stopped, _) = reconcile.fence_moved().await;
        if !stopped.is_empty() {
            tracing::info!(
                stopped = stopped.len(),
                "stopped live agents whose sessions were disposed or moved (reconcile)"
            );
        }
    });
    // Q2, Q3, Q5 on one tick: subtrees past their deadline or budget are drained (stop reason
    // `deadline` / `budget`), disposed sessions past their retention purged.
    let tick = shared
        .cfg
        .lease
        .min(crate::deadlines::DEADLINE_SWEEP_EVERY)
        .max(Duration::from_millis(250));
    every(shared, tick, true, |sweeper| async move {
        match sweeper.sweep_deadlines().await {
            Ok(r) if r.drained.is_empty() && r.failed.is_empty() => {}
            Ok(r) => tracing::info!(
                drained = r.drained.len(),
                failed = r.failed.len(),
                "drained subtrees past their deadline"
            ),
            Err(e) => tracing::warn!(error = %e, "deadline sweep failed"),
        }
        match sweeper.sweep_budgets().await {
            Ok(r) if r.drained.is_empty() && r.failed.is_empty() => {}
            Ok(r) => tracing::info!(
                drained = r.drained.len(),
                failed = r.failed.len(),
                "drained subtrees whose budget is spent"
            ),
            Err(e) => tracing::warn!(error = %e, "budget sweep failed"),
        }
        match sweeper.sweep_idle_roots().await {
            Ok(r) if r.drained.is_empty() && r.failed.is_empty() => {}
            Ok(r) => tracing::info!(
                drained = r.drained.len(),
                failed = r.failed.len(),
                "drained roots idle past their idle TTL"
            ),
            Err(e) => tracing::warn!(error = %e, "idle sweep failed"),
        }
        match sweeper.sweep_retention().await {
            Ok(r) if r.purged.is_empty() => {}
            Ok(r) => tracing::info!(
                purged = r.purged.len(),
                "purged disposed sessions past their retention"
            ),
            Err(e) => tracing::warn!(error = %e, "retention sweep failed"),
        }
        match sweeper.sweep_results().await {
            Ok(0) => {}
            Ok(forgotten) => tracing::debug!(
                forgotten,
                "forgot request results past the idempotency window"
            ),
            Err(e) => tracing::warn!(error = %e, "request results sweep failed"),
        }
    });
    // K1: sessions of nodes whose lease is gone for `takeover_after` are resumed here.
    if let Some(after) = shared.cfg.takeover_after {
        every(shared, lease, true, move |sweeper| async move {
            match sweeper.take_over(after).await {
                Ok(r) if r.resumed.is_empty() && r.failed.is_empty() => {}
                Ok(r) => tracing::info!(
                    resumed = r.resumed.len(),
                    failed = r.failed.len(),
                    "took over the sessions of dead nodes"
                ),
                Err(e) => tracing::warn!(error = %e, "takeover sweep failed"),
            }
        });
    }
    Ok(())
}

/// Runs `round` every `period` (after the first period) until shutdown, or until the node
/// winds down when `stops_on_wind_down`; the task joins the host's tasks.
fn every<F, Fut>(shared: &Arc<Shared>, period: Duration, stops_on_wind_down: bool, round: F)
where
    F: Fn(Arc<Shared>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let loop_shared = shared.clone();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = loop_shared.lifetime.shutdown.cancelled() => break,
                _ = loop_shared.lifetime.winding.cancelled(), if stops_on_wind_down => break,
                _ = tokio::time::sleep(period) => round(loop_shared.clone()).await,
            }
        }
    });
    if let Ok(mut tasks) = shared.lifetime.tasks.lock() {
        tasks.push(task);
    }
}

/// Renews this node's lease; true when it had lapsed since the previous renewal.
/// A renewal written: the lease it gives, and whether the lease lapsed before it.
struct Renewal {
    /// The renewal's time plus the lease (the registry counts from the caller's clock).
    until_ms: u64,
    /// The lease may have lapsed before it ([`Shared::renewal_lapsed`]).
    lapsed: bool,
}

async fn heartbeat(shared: &Shared) -> Result<Renewal, HostError> {
    let lease_ms = u64::try_from(shared.cfg.lease.as_millis()).unwrap_or(u64::MAX);
    let node = shared.cfg.node.clone();
    let subject = shared.cfg.subjects.node_control(&node, "status");
    let at_ms = shared.now();
    shared
        .registry
        .write(Command::Heartbeat {
            request_id: shared.mint.request(),
            at_ms,
            node,
            lease_ms,
            info: Some(subject),
        })
        .await?;
    Ok(Renewal {
        until_ms: at_ms.saturating_add(lease_ms),
        lapsed: shared.renewal_lapsed(at_ms, shared.now()),
    })
}
