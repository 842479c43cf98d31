//! The limits a birth carries (D4, Q1, Q3): what the spawning node enforces for the new
//! session's subtree. The registry applies the stricter of these and what the tree recorded,
//! at apply time, so a node with laxer settings cannot loosen a tree's limits.

use serde::{Deserialize, Serialize};

use crate::budget::Budget;
use crate::depth::MaxDepth;
use crate::fanout::FanOut;

/// A birth's limits; each part absent (or uncapped) when not given.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BirthLimits {
    /// The max depth (D4): the stricter of this and the tree's recorded one applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<MaxDepth>,
    /// The fan-out caps (Q1): the stricter of these and the tree's recorded ones apply.
    #[serde(default, skip_serializing_if = "FanOut::is_uncapped")]
    pub fan_out: FanOut,
    /// A budget over the new session's subtree (Q3); its ancestors' budgets apply too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}
