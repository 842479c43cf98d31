//! Idle roots: a top-level session that nobody talks to ends on its own.
//!
//! Top-level sessions end only by drain (the seed): a root whose turn ended stays live,
//! with its agent process, until someone drains it. An idle TTL bounds that. A root's idle TTL
//! is chosen at its spawn (`lineage spawn --idle-ttl`, the request's `idle_ttl_ms`) or else is
//! the spawning node's `limits.idle_root_ms`, and is kept in the root's log with its agent
//! record, so a cold resume elsewhere keeps it.
//!
//! A root is idle when no turn of its own runs, and it has been so since `idle_since_ms`: its
//! last turn's end, the last message accepted into its log (a child's report or settlement
//! counts: the tree is active), or the moment it became live. Its tree is busy while any
//! descendant is `starting` or `running` (a child between turns is `waiting` or `settled`).
//! The hosting node asks [`idle_verdict`] with what it knows locally, and only when that says
//! [`IdleVerdict::Due`] reads the descendants' states and asks [`tree_busy`]; a root whose
//! whole tree is quiet is drained, children first, with stop reason `idle`.

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::CoreError;
use crate::lifecycle::SessionState;

/// The longest idle TTL: 30 days, in ms (as for a deadline).
pub const MAX_IDLE_TTL_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// How long a root may stay idle before it is drained: 1 ms to [`MAX_IDLE_TTL_MS`], checked
/// where it is read (its deserializer, or [`IdleTtl::named`] for a flag or a config key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct IdleTtl(u64);

impl IdleTtl {
    /// An idle TTL of `ms`, refused with one line naming `name` (the field, flag or key it
    /// came from) when it is 0 or longer than [`MAX_IDLE_TTL_MS`].
    pub fn named(name: &str, ms: u64) -> Result<Self, CoreError> {
        if ms == 0 || ms > MAX_IDLE_TTL_MS {
            return Err(CoreError::InvalidPayload {
                what: "spawn",
                reason: format!(
                    "{name} {ms} ms is out of range; give 1 ms to 30 days, or leave it out to use the node's limits.idle_root_ms"
                ),
            });
        }
        Ok(IdleTtl(ms))
    }

    /// The TTL in ms.
    pub fn as_ms(self) -> u64 {
        self.0
    }

    /// The root's TTL: the one its spawn asked for, else the node's default, else none (it
    /// stays until drained).
    pub fn effective(requested: Option<IdleTtl>, node_default: Option<IdleTtl>) -> Option<Self> {
        requested.or(node_default)
    }
}

impl<'de> Deserialize<'de> for IdleTtl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ms = u64::deserialize(d)?;
        IdleTtl::named("idle_ttl_ms", ms).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for IdleTtl {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IdleTtl".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_IDLE_TTL_MS,
            "description": "How long a top-level session may stay idle before its tree is drained (stop reason idle), in ms."
        })
    }
}

/// What the hosting node knows of a root's activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootActivity {
    /// A turn of the root runs now.
    pub in_turn: bool,
    /// Since when nothing happened to it (see the module documentation), ms.
    pub idle_since_ms: u64,
}

/// Whether an idle root is due to be drained, as far as its host can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleVerdict {
    /// It has no idle TTL: it stays until drained.
    Kept,
    /// A turn runs: not idle.
    Busy,
    /// Idle, not long enough yet: due at `due_at_ms` if nothing happens meanwhile.
    NotYet {
        /// When the TTL runs out.
        due_at_ms: u64,
    },
    /// Idle for its whole TTL: drain it unless its tree is busy ([`tree_busy`]).
    Due,
}

/// The verdict on one root at `now_ms`. Pure.
pub fn idle_verdict(ttl: Option<IdleTtl>, activity: RootActivity, now_ms: u64) -> IdleVerdict {
    let Some(ttl) = ttl else {
        return IdleVerdict::Kept;
    };
    if activity.in_turn {
        return IdleVerdict::Busy;
    }
    let due_at_ms = activity.idle_since_ms.saturating_add(ttl.as_ms());
    match now_ms >= due_at_ms {
        true => IdleVerdict::Due,
        false => IdleVerdict::NotYet { due_at_ms },
    }
}

/// Whether a tree whose descendants are in `states` is busy: one of them is being born or
/// takes turns. Pure.
pub fn tree_busy(states: impl IntoIterator<Item = SessionState>) -> bool {
    states.into_iter().any(|state| match state {
        SessionState::Starting | SessionState::Running => true,
        SessionState::Waiting | SessionState::Settled | SessionState::Disposed => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ttl(ms: u64) -> Option<IdleTtl> {
        Some(IdleTtl::named("--idle-ttl", ms).unwrap())
    }

    #[test]
    fn a_root_without_ttl_is_kept_and_one_in_a_turn_is_busy() {
        let idle = RootActivity {
            in_turn: false,
            idle_since_ms: 0,
        };
        assert_eq!(idle_verdict(None, idle, u64::MAX), IdleVerdict::Kept);
        let turning = RootActivity {
            in_turn: true,
            ..idle
        };
        assert_eq!(idle_verdict(ttl(10), turning, 1_000), IdleVerdict::Busy);
    }

    #[test]
    fn an_idle_root_is_due_once_its_ttl_has_passed() {
        let idle = RootActivity {
            in_turn: false,
            idle_since_ms: 1_000,
        };
        assert_eq!(
            idle_verdict(ttl(500), idle, 1_499),
            IdleVerdict::NotYet { due_at_ms: 1_500 }
        );
        assert_eq!(idle_verdict(ttl(500), idle, 1_500), IdleVerdict::Due);
        // Saturating: a TTL past the end of time is never due.
        let late = RootActivity {
            in_turn: false,
            idle_since_ms: u64::MAX - 1,
        };
        assert_eq!(
            idle_verdict(ttl(MAX_IDLE_TTL_MS), late, u64::MAX - 1),
            IdleVerdict::NotYet {
                due_at_ms: u64::MAX
            }
        );
    }

    #[test]
    fn a_tree_is_busy_while_a_descendant_starts_or_runs() {
        use SessionState::*;
        assert!(!tree_busy([]));
        assert!(!tree_busy([Waiting, Settled, Disposed]));
        assert!(tree_busy([Settled, Running]));
        assert!(tree_busy([Starting]));
    }

    #[test]
    fn the_spawn_wins_over_the_node_and_bad_ttls_are_one_line() {
        assert_eq!(IdleTtl::effective(ttl(5), ttl(9)), ttl(5));
        assert_eq!(IdleTtl::effective(None, ttl(9)), ttl(9));
        assert_eq!(IdleTtl::effective(None, None), None);
        for bad in [0, MAX_IDLE_TTL_MS + 1] {
            let e = IdleTtl::named("--idle-ttl", bad).unwrap_err().to_string();
            assert!(e.contains("--idle-ttl") && !e.contains('\n'), "{e}");
        }
        let e = serde_json::from_str::<IdleTtl>("0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("idle_ttl_ms 0 ms is out of range"), "{e}");
        assert_eq!(
            serde_json::from_str::<IdleTtl>("60000").unwrap().as_ms(),
            60_000
        );
    }
}
