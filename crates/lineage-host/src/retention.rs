//! The retention sweeper (Q5): disposed sessions past `retention.disposed_after` are purged,
//! record, event log, inbox and workspace objects (issue 39).
//!
//! On each deadline tick the cluster's sweeper (the live node with the smallest id,
//! [`is_sweeper`]) reads one page of purge candidates from the registry (disposed longer ago
//! than the retention, no child record left: oldest disposal first, so leaves before their
//! parents), purges their event-log subjects, their inboxes (messages and consumer) and their
//! workspace objects from JetStream, and then sends one `purge` command naming them, which the registry re-checks at
//! apply time and turns into tombstones. The streams go first: a sweeper that dies between
//! the two leaves records whose logs are already empty, and the next sweep purges them again
//! (both steps are idempotent), so nothing purged from the registry keeps messages behind.
//! A parent comes up on the sweep after its last child went.
//!
//! On the same tick, when `retention.request_results_ms` is set, the sweeper tells the
//! registry to forget the stored results of commands accepted longer ago than that
//! (`forget_results`, at most every tenth of the window, in bounded batches): the registry
//! keeps every accepted command's result for retries by its request id, a day by default, and
//! a steady churn of births and disposals otherwise grows its memory for that long.

use std::sync::Arc;

use lineage_core::ids::SessionId;
use std::sync::atomic::Ordering;

use lineage_core::retention::PURGE_BATCH;
use lineage_registry::types::{Command, CommandResponse};

use crate::error::HostError;
use crate::lease::is_sweeper;
use crate::shared::Shared;

/// What one retention sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionSweepReport {
    /// The sessions purged, in order.
    pub purged: Vec<SessionId>,
}

impl Shared {
    /// One retention sweep (see the module documentation); nothing unless a retention is
    /// configured and this node is the sweeper.
    pub(crate) async fn sweep_retention(
        self: &Arc<Self>,
    ) -> Result<RetentionSweepReport, HostError> {
        let Some(keep) = self.cfg.disposed_after else {
            return Ok(RetentionSweepReport::default());
        };
        self.lifetime.check_running()?;
        let now = self.now();
        let nodes = self.registry.nodes().await?;
        if !is_sweeper(&nodes, &self.cfg.node, now) {
            return Ok(RetentionSweepReport::default());
        }
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
        let page = u32::try_from(PURGE_BATCH).unwrap_or(u32::MAX);
        let due = self.registry.purge_candidates(now, keep_ms, page).await?;
        if due.is_empty() {
            return Ok(RetentionSweepReport::default());
        }
        self.bus.events.purge(&due).await?;
        self.bus.inbox.purge(&due).await?;
        lineage_bus::ports::purge_workspaces(&*self.bus.workspaces, &due).await?;
        let response = self
            .registry
            .write(Command::Purge {
                request_id: self.mint.request(),
                at_ms: now,
                sessions: due,
                disposed_after_ms: keep_ms,
            })
            .await?;
        match response {
            CommandResponse::Purged { sessions } => Ok(RetentionSweepReport { purged: sessions }),
            other => Err(HostError::Internal(format!(
                "the registry answered a purge with {other:?}"
            ))),
        }
    }

    /// Forgets the registry's stored results past `retention.request_results_ms` (see the
    /// module documentation): how many. Nothing unless that is configured, this node is the
    /// sweeper, and a tenth of the window (at least a second) passed since the last sweep.
    pub(crate) async fn sweep_results(self: &Arc<Self>) -> Result<u64, HostError> {
        let Some(kept) = self.cfg.request_results_kept else {
            return Ok(0);
        };
        self.lifetime.check_running()?;
        let now = self.now();
        let kept_ms = u64::try_from(kept.as_millis()).unwrap_or(u64::MAX);
        let last = self.results_swept_at_ms.load(Ordering::SeqCst);
        if last != 0 && now.saturating_sub(last) < (kept_ms / 10).max(1_000) {
            return Ok(0);
        }
        self.results_swept_at_ms.store(now, Ordering::SeqCst);
        let nodes = self.registry.nodes().await?;
        if !is_sweeper(&nodes, &self.cfg.node, now) {
            return Ok(0);
        }
        let mut forgotten = 0;
        // Bounded: a few batches per sweep; what is left goes at the next one.
        for _ in 0..RESULT_BATCHES_PER_SWEEP {
            let response = self
                .registry
                .write(Command::ForgetResults {
                    request_id: self.mint.request(),
                    at_ms: now,
                    kept_ms,
                })
                .await?;
            match response {
                CommandResponse::ResultsForgotten { count, more } => {
                    forgotten += count;
                    if !more {
                        break;
                    }
                }
                CommandResponse::Refused(refusal) => return Err(HostError::Refused(refusal)),
                other => {
                    return Err(HostError::Internal(format!(
                        "the registry answered forget_results with {other:?}"
                    )))
                }
            }
        }
        Ok(forgotten)
    }
}

/// How many `forget_results` commands one sweep sends at most.
const RESULT_BATCHES_PER_SWEEP: usize = 8;
