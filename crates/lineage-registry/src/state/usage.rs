//! Usage and budgets (Q3): a session's usage, summed up every ancestor, and the spent budget
//! a birth is refused under.

use super::*;

impl RegistryState {
    /// Replaces the session's usage; fenced by the placement epoch like `set_state`.
    pub(super) fn record_usage(
        &mut self,
        at_ms: u64,
        session: &SessionId,
        usage: &lineage_core::usage::SessionUsage,
        expected_epoch: Option<u64>,
    ) -> Refusal {
        // Usage is a fact about work done, not a lifecycle change: a report that arrives after
        // its session was disposed (a drain, a budget's drain among them, raced the turn that
        // spent it) still counts, or a tree's sums would miss what it spent (issue 12, Q3).
        // The epoch still fences a host that lost the session.
        let record = self.known(session)?;
        fenced(record, session, expected_epoch)?;
        let old = record.usage.replace(Box::new(usage.clone()));
        record.updated_at_ms = at_ms;
        self.add_usage_up(session, old.as_deref(), usage);
        Ok(CommandResponse::UsageRecorded {
            session: session.clone(),
        })
    }

    /// Q3: `session`'s report changed from `old` to `new`: every sum from it up to its root
    /// follows, and an undisposed ancestor (or itself) whose budget that spends is listed in
    /// `spent_budgets`. Bounded by the number of sessions (a corrupt map never loops forever).
    pub(super) fn add_usage_up(
        &mut self,
        session: &SessionId,
        old: Option<&SessionUsage>,
        new: &SessionUsage,
    ) {
        self.add_up(session, |total| {
            if let Some(old) = old {
                total.remove(old);
            }
            total.add(new);
        });
    }

    /// `change` applied to the subtree sum of `session` and of every ancestor, listing each
    /// undisposed one whose budget that spends (Q3). Bounded by the number of sessions.
    pub(super) fn add_up(&mut self, session: &SessionId, change: impl Fn(&mut UsageTotal)) {
        let mut cursor = Some(session.clone());
        let mut steps = 0usize;
        while let Some(id) = cursor {
            steps += 1;
            if steps > self.sessions.len() {
                break;
            }
            let total = self.subtree_usage.entry(id.clone()).or_default();
            change(total);
            let Some(record) = self.sessions.get(&id) else {
                break;
            };
            if let Some(budget) = record.budget.as_deref() {
                if record.state != SessionState::Disposed && budget.check(&id, total).is_err() {
                    self.spent_budgets.insert(id.clone());
                }
            }
            cursor = record.header.parent_session().cloned();
        }
    }

    /// Q3: the first spent budget at or above `id` (nearest first), with the numbers: what a
    /// birth under `id` is refused with.
    pub fn spent_budget_over(&self, id: &SessionId) -> Option<BudgetSpent> {
        let mut cursor = Some(id);
        let mut steps = 0usize;
        while let Some(current) = cursor {
            steps += 1;
            if steps > self.sessions.len() {
                return None;
            }
            let record = self.sessions.get(current)?;
            if let Some(budget) = record.budget.as_deref() {
                let total = self.subtree_usage.get(current).cloned().unwrap_or_default();
                if let Err(spent) = budget.check(current, &total) {
                    return Some(spent);
                }
            }
            cursor = record.header.parent_session();
        }
        None
    }
}
