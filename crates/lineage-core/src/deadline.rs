//! Deadlines (Q2): a tree that runs past its time is drained, children first.
//!
//! A spawn may ask for a `timeout_ms`; the spawning node turns it into an absolute deadline
//! with its own clock ([`Timeout::deadline_from`]) and freezes `min(parent's, requested)` in the
//! child's header ([`crate::header::SessionHeader::with_deadline`]): a child inherits its
//! parent's deadline and can only shorten it, so no child outlives its parent's deadline. The
//! registry refuses a header whose deadline is later than its parent's, and indexes the
//! undisposed sessions by deadline. The cluster's sweeper reads the overdue ones and drains
//! the subtrees that [`deadline_drain_roots`] picks, with stop reason `deadline`: the drained
//! root's parent (when it has one that is not overdue itself) gets the settlement notice.

use std::collections::BTreeSet;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::CoreError;
use crate::ids::SessionId;

/// The longest timeout a spawn may ask for: 30 days, in ms.
pub const MAX_TIMEOUT_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// How long a new session's subtree may run (Q2): 1 to [`MAX_TIMEOUT_MS`] ms, checked where
/// the request is parsed (its deserializer, or [`Timeout::named`] for a flag), so a bad one
/// refuses the whole request in one line and nothing checks it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Timeout(u64);

impl Timeout {
    /// A timeout of `ms`, refused with a line naming `name` (the field or flag it came from)
    /// when it is 0 or longer than [`MAX_TIMEOUT_MS`].
    pub fn named(name: &str, ms: u64) -> Result<Self, CoreError> {
        if ms == 0 || ms > MAX_TIMEOUT_MS {
            return Err(CoreError::InvalidPayload {
                what: "spawn",
                reason: format!(
                    "{name} {ms} is out of range; give 1 to {MAX_TIMEOUT_MS} ms (30 days), or leave it out for no deadline of its own"
                ),
            });
        }
        Ok(Timeout(ms))
    }

    /// The timeout in ms.
    pub fn as_ms(self) -> u64 {
        self.0
    }

    /// The absolute deadline of a spawn that asked for this timeout, on the spawning node's
    /// clock `now_ms` (saturating).
    pub fn deadline_from(self, now_ms: u64) -> u64 {
        now_ms.saturating_add(self.0)
    }
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ms = u64::deserialize(d)?;
        Timeout::named("timeout_ms", ms).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Timeout {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timeout".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_TIMEOUT_MS,
            "description": "how long the new session's subtree may run, in ms (Q2): 1 ms to 30 days",
        })
    }
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
        let t = |ms| Timeout::named("timeout_ms", ms);
        assert_eq!(t(500).unwrap().deadline_from(1_000), 1_500);
        assert_eq!(
            t(MAX_TIMEOUT_MS).unwrap().deadline_from(u64::MAX - 1),
            u64::MAX
        );
        for bad in [0, MAX_TIMEOUT_MS + 1] {
            let e = t(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("timeout_ms {bad} is out of range")),
                "{e}"
            );
            assert!(!e.contains('\n'));
            let parsed = serde_json::from_value::<Timeout>(serde_json::json!(bad));
            assert!(parsed.unwrap_err().to_string().contains("is out of range"));
        }
        let flag = Timeout::named("--deadline-ms", 0).unwrap_err().to_string();
        assert!(flag.contains("--deadline-ms 0 is out of range"), "{flag}");
        assert_eq!(
            serde_json::from_value::<Timeout>(serde_json::json!(7))
                .unwrap()
                .as_ms(),
            7
        );
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
