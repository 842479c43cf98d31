//! Fan-out caps (Q1): how many live children a parent may have and how many live sessions a
//! tree may hold under its root, recorded on the tree at birth (like the max depth) and checked
//! by the registry at apply time, so no node can bypass them.
//!
//! "Live" means not disposed: a continuable child that finished its task still counts (it can be
//! woken and holds its place), a disposed one frees its slot. A cap set at a root applies to
//! the whole tree; a spawn may only tighten it ([`FanOut::stricter`]).

use serde::{Deserialize, Serialize};

/// The fan-out caps of a tree; `None`: no cap.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanOut {
    /// Live children per parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_children: Option<u32>,
    /// Live descendants of the root (the root itself not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_descendants: Option<u32>,
}

/// A birth refused by a fan-out cap: which cap, the count it found and the cap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cap", rename_all = "snake_case")]
pub enum FanOutExceeded {
    /// The parent already has `live` live children, `max` allowed.
    MaxChildren {
        /// Live children the parent has.
        live: u64,
        /// The cap.
        max: u32,
    },
    /// The tree already holds `live` live descendants, `max` allowed.
    MaxDescendants {
        /// Live descendants of the root.
        live: u64,
        /// The cap.
        max: u32,
    },
}

impl std::fmt::Display for FanOutExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FanOutExceeded::MaxChildren { live, max } => write!(
                f,
                "fan-out cap: this parent already has {live} live children (max_children {max}); wait for one to finish (wait_for_children) or raise limits.max_children"
            ),
            FanOutExceeded::MaxDescendants { live, max } => write!(
                f,
                "fan-out cap: this tree already holds {live} live descendants (max_descendants {max}); wait for some to finish or raise limits.max_descendants"
            ),
        }
    }
}

impl FanOut {
    /// No caps.
    pub const NONE: FanOut = FanOut {
        max_children: None,
        max_descendants: None,
    };

    /// The stricter of `self` (what a spawn asks for) and `recorded` (what its tree holds),
    /// cap by cap: a spawn can tighten a tree's caps, never loosen them.
    pub fn stricter(self, recorded: FanOut) -> FanOut {
        let min = |a: Option<u32>, b: Option<u32>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        FanOut {
            max_children: min(self.max_children, recorded.max_children),
            max_descendants: min(self.max_descendants, recorded.max_descendants),
        }
    }

    /// Whether one more child fits, given the parent's live children and the tree's live
    /// descendants now (before the birth).
    pub fn admit(self, live_children: u64, live_descendants: u64) -> Result<(), FanOutExceeded> {
        if let Some(max) = self.max_children {
            if live_children >= u64::from(max) {
                return Err(FanOutExceeded::MaxChildren {
                    live: live_children,
                    max,
                });
            }
        }
        if let Some(max) = self.max_descendants {
            if live_descendants >= u64::from(max) {
                return Err(FanOutExceeded::MaxDescendants {
                    live: live_descendants,
                    max,
                });
            }
        }
        Ok(())
    }

    /// Whether there is any cap (the registry counts only then).
    pub fn is_capped(self) -> bool {
        self.max_children.is_some() || self.max_descendants.is_some()
    }

    /// No cap at all (what serde leaves out).
    pub fn is_uncapped(&self) -> bool {
        !self.is_capped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q1_stricter_takes_the_smaller_cap_of_each_kind() {
        let asked = FanOut {
            max_children: Some(5),
            max_descendants: None,
        };
        let recorded = FanOut {
            max_children: Some(3),
            max_descendants: Some(10),
        };
        assert_eq!(
            asked.stricter(recorded),
            FanOut {
                max_children: Some(3),
                max_descendants: Some(10)
            }
        );
        assert_eq!(FanOut::NONE.stricter(FanOut::NONE), FanOut::NONE);
    }

    #[test]
    fn q1_admit_refuses_at_the_cap_with_the_numbers() {
        let caps = FanOut {
            max_children: Some(2),
            max_descendants: Some(4),
        };
        assert_eq!(caps.admit(1, 3), Ok(()));
        let full = caps.admit(2, 3).unwrap_err();
        assert_eq!(full, FanOutExceeded::MaxChildren { live: 2, max: 2 });
        assert_eq!(
            full.to_string(),
            "fan-out cap: this parent already has 2 live children (max_children 2); wait for one to finish (wait_for_children) or raise limits.max_children"
        );
        assert_eq!(
            caps.admit(0, 4),
            Err(FanOutExceeded::MaxDescendants { live: 4, max: 4 })
        );
        assert_eq!(FanOut::NONE.admit(u64::MAX, u64::MAX), Ok(()));
        assert!(!FanOut::NONE.is_capped());
    }
}
