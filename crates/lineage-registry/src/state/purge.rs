//! Q5: purging disposed sessions past their retention (see `lineage_core::retention`).
//!
//! The purge sweep reads the due sessions ([`RegistryState::purge_candidates`], oldest
//! disposal first, so leaves before their parents), purges their logs and inboxes from the
//! streams, then sends one `purge` command naming them. The command re-checks each one at
//! apply time (`purge_due`: disposed, past the retention, no child record left; others are
//! left as they are), so a stale or replayed list never removes a session too early. A purged
//! session's record leaves the state and every index, its parent forgets it as a child and
//! keeps its usage (`purged_usage`, so sums and budgets above it are unchanged, on every
//! replica and after a snapshot), and its id joins the tombstone: it is never registered again.

use lineage_core::ids::SessionId;
use lineage_core::retention::{purge_due, PURGE_BATCH};

use super::{Refusal, RegistryState};
use crate::types::{CommandResponse, RegistryRefusal, SessionState};

impl RegistryState {
    /// The disposed sessions due to be purged at `now_ms` under a retention of
    /// `disposed_after_ms`, oldest disposal first, at most `limit` (clamped to
    /// 1..=[`PURGE_BATCH`]). A parent whose children are still recorded is skipped (it comes
    /// once they are gone).
    pub fn purge_candidates(
        &self,
        now_ms: u64,
        disposed_after_ms: u64,
        limit: usize,
    ) -> Vec<SessionId> {
        let limit = limit.clamp(1, PURGE_BATCH);
        let cutoff = now_ms.saturating_sub(disposed_after_ms);
        self.disposed_by_age
            .iter()
            .take_while(|(at, _)| *at <= cutoff)
            .filter(|(at, id)| {
                self.sessions
                    .get(id)
                    .is_some_and(|r| purge_due(*at, r.children.len(), now_ms, disposed_after_ms))
            })
            .take(limit)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// How many sessions were purged in all.
    pub fn purged_count(&self) -> u64 {
        self.tombstone.purged
    }

    pub(super) fn purge(
        &mut self,
        at_ms: u64,
        sessions: &[SessionId],
        disposed_after_ms: u64,
    ) -> Refusal {
        if sessions.len() > PURGE_BATCH {
            return Err(RegistryRefusal::PurgeBatchTooLarge {
                count: sessions.len(),
                max: PURGE_BATCH,
            });
        }
        let mut purged = Vec::new();
        for id in sessions {
            let due = self.sessions.get(id).is_some_and(|r| {
                r.state == SessionState::Disposed
                    && purge_due(r.updated_at_ms, r.children.len(), at_ms, disposed_after_ms)
            });
            if due {
                self.purge_one(id);
                purged.push(id.clone());
            }
        }
        Ok(CommandResponse::Purged { sessions: purged })
    }

    /// Removes one due session (checked by the caller).
    fn purge_one(&mut self, id: &SessionId) {
        let Some(record) = self.sessions.remove(id) else {
            return;
        };
        self.index.remove(&record);
        self.disposed_by_age
            .remove(&(record.updated_at_ms, id.clone()));
        self.spent_budgets.remove(id);
        let carried = self.subtree_usage.remove(id).unwrap_or_default();
        if let Some(parent) = record
            .header
            .parent_session()
            .and_then(|p| self.sessions.get_mut(p))
        {
            parent.children.remove(id);
            if !carried.is_empty() {
                parent
                    .purged_usage
                    .get_or_insert_with(Default::default)
                    .add_total(&carried);
            }
        }
        self.tombstone.record(id);
    }
}
