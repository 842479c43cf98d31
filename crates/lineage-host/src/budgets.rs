//! The budget sweeper (Q3): a subtree whose budget is spent is drained, children first, with
//! stop reason `budget`.
//!
//! The registry sums the usage agents report over every subtree as it is recorded and lists
//! the undisposed sessions whose budget is spent (`lineage_core::budget`); it already refuses
//! any birth under them. On the same tick as the deadline sweep ([`crate::deadlines`]), the
//! cluster's sweeper reads one page of them and drains each subtree (one drain per holder
//! whose ancestors are not listed too, as `deadline_drain_roots` picks for deadlines): every
//! turn cut short and every settlement says `budget`, and the holder's parent gets the notice.
//! The turn that spent the budget finishes first (its usage is recorded at its end); at most
//! one sweep period later nothing in the subtree takes another turn.

use std::sync::Arc;

use lineage_core::deadline::{deadline_drain_roots, OverdueSession};
use lineage_core::messages::StopReason;
use lineage_registry::state::SPENT_BUDGETS_PAGE;

use crate::deadlines::DeadlineSweepReport;
use crate::error::HostError;
use crate::lease::is_sweeper;
use crate::shared::Shared;

impl Shared {
    /// One budget sweep (see the module documentation); nothing unless this node is the
    /// sweeper. The report lists the holders drained.
    pub(crate) async fn sweep_budgets(self: &Arc<Self>) -> Result<DeadlineSweepReport, HostError> {
        self.lifetime.check_running()?;
        let now = self.now();
        let nodes = self.registry.nodes().await?;
        if !is_sweeper(&nodes, &self.cfg.node, now) {
            return Ok(DeadlineSweepReport::default());
        }
        let page = u32::try_from(SPENT_BUDGETS_PAGE).unwrap_or(u32::MAX);
        let records = self.registry.spent_budgets(page).await?;
        // The same choice of roots as for deadlines: every holder is "due" now.
        let spent: Vec<OverdueSession> = records
            .iter()
            .map(|r| OverdueSession {
                session: r.id().clone(),
                parent: r.header.parent_session().cloned(),
                deadline_at_ms: 0,
            })
            .collect();
        Ok(self
            .drain_subtrees(deadline_drain_roots(&spent, now), StopReason::Budget)
            .await)
    }
}
