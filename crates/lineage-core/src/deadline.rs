//! Deadlines (Q2): a tree that runs past its time is drained, children first.
//!
//! A spawn may ask for a `timeout_ms`; the spawning node turns it into an absolute deadline
//! with its own clock ([`deadline_from_timeout`]) and freezes `min(parent's, requested)` in the
//! child's header ([`crate::header::SessionHeader::with_deadline`]): a child inherits its
//! parent's deadline and can only shorten it, so no child outlives its parent's deadline. The
//! registry refuses a header whose deadline is later than its parent's, and indexes the
//! undisposed sessions by deadline. The cluster's sweeper reads the overdue ones and drains
//! the subtrees that [`deadline_drain_roots`] picks, with stop reason `deadline`: the drained
//! root's parent (when it has one that is not overdue itself) gets the settlement notice.

use std::collections::BTreeSet;

use crate::error::CoreError;
use crate::ids::SessionId;

/// The longest timeout a spawn may ask for: 30 days, in ms.
pub const MAX_TIMEOUT_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// The absolute deadline of a spawn that asked for `timeout_ms`, on the spawning node's clock
/// `now_ms`. Refused when the timeout is 0 or longer than [`MAX_TIMEOUT_MS`].
pub fn deadline_from_timeout(now_ms: u64, timeout_ms: u64) -> Result<u64, CoreError> {
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(CoreError::InvalidPayload {
            what: "spawn",
            reason: format!(
                "timeout_ms {timeout_ms} is out of range; give 1 to {MAX_TIMEOUT_MS} ms (30 days), or leave it out for no deadline of its own"
            ),
        });
    }
    Ok(now_ms.saturating_add(timeout_ms))
}

/// A session past its deadline, as the sweeper reads it from the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverdueSession {
    /// The session.
    pub session: SessionId,
    /// Its parent, if any.
    pub parent: Option<SessionId>,
    /// Its deadline.
    pub deadline_at_ms: u64,
}

/// The subtrees to drain for `overdue` at `now_ms`: each overdue session (deadline at or
/// before `now_ms`) whose parent is not overdue too (draining the parent's subtree covers it),
/// earliest deadline first. A child's deadline is never later than its parent's, so an
/// overdue parent's children are overdue as well; when a page of the index holds a child but
/// not its parent, the child is drained on its own first and its parent on a later sweep.
pub fn deadline_drain_roots(overdue: &[OverdueSession], now_ms: u64) -> Vec<SessionId> {
    let due: Vec<&OverdueSession> = overdue
        .iter()
        .filter(|o| o.deadline_at_ms <= now_ms)
        .collect();
    let ids: BTreeSet<&SessionId> = due.iter().map(|o| &o.session).collect();
    let mut roots: Vec<&OverdueSession> = due
        .into_iter()
        .filter(|o| o.parent.as_ref().is_none_or(|p| !ids.contains(p)))
        .collect();
    roots.sort_by(|a, b| (a.deadline_at_ms, &a.session).cmp(&(b.deadline_at_ms, &b.session)));
    roots.dedup_by(|a, b| a.session == b.session);
    roots.into_iter().map(|o| o.session.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ids::sid;

    fn overdue(n: u32, parent: Option<u32>, at: u64) -> OverdueSession {
        OverdueSession {
            session: sid(n),
            parent: parent.map(sid),
            deadline_at_ms: at,
        }
    }

    #[test]
    fn q2_a_timeout_becomes_an_absolute_deadline_and_bad_ones_are_refused() {
        assert_eq!(deadline_from_timeout(1_000, 500).unwrap(), 1_500);
        assert_eq!(
            deadline_from_timeout(u64::MAX - 1, MAX_TIMEOUT_MS).unwrap(),
            u64::MAX
        );
        for bad in [0, MAX_TIMEOUT_MS + 1] {
            let e = deadline_from_timeout(1_000, bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("timeout_ms {bad} is out of range")),
                "{e}"
            );
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn q2_only_the_top_most_overdue_session_of_each_subtree_is_drained() {
        // 1 > 2 > 3 all overdue; 4 (child of live 9) overdue; 5 not due yet.
        let all = [
            overdue(3, Some(2), 100),
            overdue(2, Some(1), 150),
            overdue(1, None, 150),
            overdue(4, Some(9), 120),
            overdue(5, Some(9), 5_000),
        ];
        assert_eq!(deadline_drain_roots(&all, 1_000), vec![sid(4), sid(1)]);
        // A page that holds the child but not its parent drains the child first.
        assert_eq!(deadline_drain_roots(&all[..1], 1_000), vec![sid(3)]);
        assert!(deadline_drain_roots(&all, 99).is_empty());
    }
}
