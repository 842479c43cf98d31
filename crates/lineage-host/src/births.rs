//! The birth sweeper (S1, M2, E1; issue 10, fault 3): births that no node started in time are
//! disposed, and their parents are told.
//!
//! Lineage's nodes register a birth only once they host it (`hosted`, see [`crate::start`]), so
//! they never leave a `starting` record. A registration that is not `hosted` (written by a
//! registry client that does not host the session, such as an older node or a tool) is
//! `starting`, with a start deadline, until its node confirms the start. When that never
//! happens, the record would otherwise stay forever, looking alive. Every lease period the
//! cluster's sweeper (the live node with the smallest id, [`is_sweeper`], the same node that
//! runs the takeover sweep) reads one page of overdue births and executes what
//! [`expire_births`] (pure, in `lineage-core`) decides for each, in this order:
//!
//! 1. `expire_start` in the registry: refused for a birth that started meanwhile or is not due,
//!    so a start that won the race is never disposed; its request id is derived from the
//!    session (`expire-start-<id>`), so two sweepers racing both get the first answer;
//! 2. only once that committed (`disposed`, not `already`): `subagent/end` (stop reason
//!    `failed`) on the parent's end subject;
//! 3. the settlement notice into the parent's inbox (seq 1, `Nats-Msg-Id <child>-1`, as the
//!    child itself would have sent it; deduplicated when two sweepers publish it).
//!
//! A sweeper that dies between 1 and 3 leaves the parent without the notice (the birth is
//! disposed, so the next sweep does not list it): at most once, not at least once.
//!
//! A hosting node writes a birth's creation window and registers it at once
//! ([`crate::start`]); a node that stops between the two leaves a `running` record with an
//! empty log. Whoever would resume it (re-adoption, takeover, a followup) finds nothing to
//! resume and disposes it the same way ([`Shared::dispose_cut_short`],
//! [`lineage_core::lifecycle::cut_short_birth`]), under one request id per session.

use std::sync::Arc;

use lineage_core::ids::RequestId;
use lineage_core::ids::SessionId;
use lineage_core::lifecycle::{
    cut_short_birth, cut_short_run, expire_births, BirthExpiry, OverdueBirth,
};
use lineage_core::messages::{InboxMessage, LifecycleEvent, StopReason};
use lineage_registry::state::OVERDUE_BIRTHS_PAGE;
use lineage_registry::types::{Command, CommandResponse, RegistryRefusal, SessionRecord};

use crate::error::HostError;
use crate::lease::is_sweeper;
use crate::settle::publish_with_retry;
use crate::shared::Shared;

/// What one birth sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BirthSweepReport {
    /// Births disposed by this sweep (their parents were told).
    pub expired: Vec<SessionId>,
    /// Births that could not be disposed now, with the one-line reason (tried again next time).
    pub failed: Vec<(SessionId, String)>,
}

/// The sweeper's view of an overdue record: what [`expire_births`] needs from it. Pure.
pub fn overdue_birth(record: &SessionRecord) -> OverdueBirth {
    OverdueBirth {
        session: record.id().clone(),
        parent: record.header.parent_session().cloned(),
        descriptor: record.descriptor.as_ref().and_then(|d| d.parse()),
        run: record.runs.first().cloned(),
        node: record.placement.as_ref().map(|p| p.node.clone()),
        created_at_ms: record.created_at_ms,
        start_deadline_ms: record.start_deadline_ms.unwrap_or(0),
    }
}

impl Shared {
    /// One birth sweep (see the module documentation); nothing unless this node is the
    /// sweeper.
    pub(crate) async fn sweep_births(self: &Arc<Self>) -> Result<BirthSweepReport, HostError> {
        self.lifetime.check_running()?;
        let mut report = BirthSweepReport::default();
        let now = self.now();
        let nodes = self.registry.nodes().await?;
        if !is_sweeper(&nodes, &self.cfg.node, now) {
            return Ok(report);
        }
        let page = u32::try_from(OVERDUE_BIRTHS_PAGE).unwrap_or(u32::MAX);
        let records = self.registry.overdue_births(now, page).await?;
        let births: Vec<OverdueBirth> = records.iter().map(overdue_birth).collect();
        for expiry in expire_births(&births, now) {
            let session = expiry.session.clone();
            let request_id = RequestId::parse(&format!("expire-start-{session}"))?;
            let expired = self
                .registry
                .write(Command::ExpireStart {
                    request_id,
                    at_ms: now,
                    session: session.clone(),
                })
                .await;
            match expired {
                Ok(CommandResponse::Disposed { already: false, .. }) => {}
                // Disposed by someone else (a drain, the spawning node), or it started after
                // all: nothing to tell.
                Ok(_)
                | Err(HostError::Refused(
                    RegistryRefusal::NotStarting { .. } | RegistryRefusal::StartNotDue { .. },
                )) => continue,
                Err(e) => {
                    tracing::warn!(%session, error = %e, "overdue birth not disposed; next sweep retries");
                    report.failed.push((session, e.to_string()));
                    continue;
                }
            }
            tracing::info!(%session, parent = ?births.iter().find(|b| b.session == session).and_then(|b| b.parent.clone()), "birth never started: disposed");
            self.tell_parent(expiry).await;
            report.expired.push(session);
        }
        Ok(report)
    }

    /// A birth cut short (a `running` record whose log is empty, see the module
    /// documentation): disposed, and once that committed its parent is told. The error is
    /// what a resume of it answers.
    pub(crate) async fn dispose_cut_short(&self, record: &SessionRecord) -> HostError {
        let refused = HostError::Disposed(format!(
            "{} (its birth was cut short: its node stopped before its log was written, so there is nothing to resume)",
            record.id()
        ));
        // Disposed by someone else first (a drain, another node's resume): told there.
        match self
            .dispose_and_tell("cut-short", record, cut_short_birth)
            .await
        {
            Ok(_) => refused,
            Err(e) => e,
        }
    }

    /// A one-shot found `running` on a node being adopted (its run died with that node; a
    /// one-shot is never resumed): disposed, and once that committed its end is published
    /// ([`cut_short_run`]). Idempotent: a caller that disposed it first leaves nothing to do.
    pub(crate) async fn dispose_orphaned_one_shot(&self, record: &SessionRecord) {
        if let Err(e) = self.dispose_and_tell("orphan", record, cut_short_run).await {
            tracing::warn!(session = %record.id(), error = %e, "cannot dispose a one-shot cut short by its node's stop; the next adoption tries again");
        }
    }

    /// Disposes `record` under request id `<prefix>-<session>` (a retry is the same write)
    /// and, when this write disposed it, tells its parent what `expiry` makes of it. True
    /// when this write disposed it; false when someone had first.
    async fn dispose_and_tell(
        &self,
        prefix: &str,
        record: &SessionRecord,
        expiry: fn(&OverdueBirth, u64) -> BirthExpiry,
    ) -> Result<bool, HostError> {
        let session = record.id().clone();
        let request_id = RequestId::parse(&format!("{prefix}-{session}"))?;
        let disposed = self
            .registry
            .write(Command::Dispose {
                stop_reason: Some(StopReason::Failed),
                request_id,
                at_ms: self.now(),
                session: session.clone(),
            })
            .await?;
        let first = matches!(disposed, CommandResponse::Disposed { already: false, .. });
        if first {
            tracing::info!(%session, why = prefix, "cut short by its node's stop: disposed");
            self.tell_parent(expiry(&overdue_birth(record), self.now()))
                .await;
        }
        Ok(first)
    }

    /// `subagent/end`, then the settlement notice, of a birth that never started.
    async fn tell_parent(&self, expiry: BirthExpiry) {
        let session = expiry.session;
        if let Some(end) = expiry.end {
            if let Err(e) = self.bus.lifecycle.publish(&LifecycleEvent::End(end)).await {
                tracing::warn!(%session, error = %e, "cannot publish subagent/end");
            }
        }
        if let Some(notice) = expiry.notice {
            publish_with_retry(self, &session, InboxMessage::Settled(notice)).await;
        }
    }
}
