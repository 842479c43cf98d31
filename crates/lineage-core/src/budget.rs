//! Budgets (Q3): a subtree may carry a budget of tokens and/or cost; once the usage its
//! sessions reported reaches it, the subtree is spent: no new child is registered under it,
//! and the sweeper drains it with stop reason `budget`.
//!
//! Usage is what agents report (`lineage_core::usage`): each session's latest report, summed
//! over the subtree ([`UsageTotal`]). The registry keeps those sums up to date as usage is
//! recorded (per ancestor, so a check is one lookup per ancestor with a budget) and refuses a
//! birth under a spent budget with [`BudgetSpent`], which carries the numbers. Cost is
//! compared in millionths, summed over every currency reported (a budget has no currency of
//! its own: give a tree agents that report one).

use serde::{Deserialize, Serialize};

use crate::ids::SessionId;
use crate::usage::UsageTotal;

/// A subtree's budget; `None` fields are unlimited.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Tokens, summed over the subtree's latest reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Cost in millionths (e.g. 1,000,000 = 1 USD), summed over the subtree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_micros: Option<u64>,
}

impl Budget {
    /// True when neither limit is set.
    pub fn is_unlimited(&self) -> bool {
        self.max_tokens.is_none() && self.max_cost_micros.is_none()
    }

    /// The budget of `holder` checked against its subtree's `total`: spent when a limit is
    /// reached (used >= max).
    pub fn check(&self, holder: &SessionId, total: &UsageTotal) -> Result<(), BudgetSpent> {
        let cost: u64 = total
            .cost_micros
            .values()
            .fold(0u64, |a, b| a.saturating_add(*b));
        let tokens = self.max_tokens.filter(|max| total.used_tokens >= *max);
        let money = self.max_cost_micros.filter(|max| cost >= *max);
        if tokens.is_none() && money.is_none() {
            return Ok(());
        }
        Err(BudgetSpent {
            holder: holder.clone(),
            used_tokens: total.used_tokens,
            max_tokens: self.max_tokens,
            cost_micros: cost,
            max_cost_micros: self.max_cost_micros,
        })
    }
}

/// A spent budget, with the numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("budget spent: the subtree of {holder} has used {} of its budget of {}; finish without spawning or give the tree a larger budget", used(self), limits(self))]
pub struct BudgetSpent {
    /// The session whose budget is spent.
    pub holder: SessionId,
    /// Tokens its subtree reported.
    pub used_tokens: u64,
    /// Its token limit.
    pub max_tokens: Option<u64>,
    /// Cost (millionths) its subtree reported.
    pub cost_micros: u64,
    /// Its cost limit.
    pub max_cost_micros: Option<u64>,
}

fn money(micros: u64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

fn used(b: &BudgetSpent) -> String {
    let mut parts = Vec::new();
    if b.max_tokens.is_some() {
        parts.push(format!("{} tokens", b.used_tokens));
    }
    if b.max_cost_micros.is_some() {
        parts.push(format!("{} in cost", money(b.cost_micros)));
    }
    parts.join(" and ")
}

fn limits(b: &BudgetSpent) -> String {
    let mut parts = Vec::new();
    if let Some(max) = b.max_tokens {
        parts.push(format!("{max} tokens"));
    }
    if let Some(max) = b.max_cost_micros {
        parts.push(money(max));
    }
    parts.join(" and ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::SessionUsage;

    use crate::ids::sid;

    fn total(tokens: u64, usd_micros: u64) -> UsageTotal {
        let mut t = UsageTotal::default();
        t.add(&SessionUsage {
            used_tokens: tokens,
            cost_micros: Some(usd_micros),
            currency: Some("USD".into()),
            ..Default::default()
        });
        t
    }

    #[test]
    fn q3_a_budget_is_spent_once_a_limit_is_reached_and_says_the_numbers() {
        let b = Budget {
            max_tokens: Some(250),
            max_cost_micros: None,
        };
        assert!(b.check(&sid(1), &total(249, 0)).is_ok());
        let spent = b.check(&sid(1), &total(250, 0)).unwrap_err();
        assert_eq!(
            spent.to_string(),
            "budget spent: the subtree of 01936c1e-7a3b-7cde-8f00-000000000001 has used 250 tokens of its budget of 250 tokens; finish without spawning or give the tree a larger budget"
        );
        let money = Budget {
            max_tokens: Some(1_000),
            max_cost_micros: Some(1_500),
        };
        let spent = money.check(&sid(1), &total(10, 1_500)).unwrap_err();
        assert!(
            spent.to_string().contains(
                "has used 10 tokens and 0.001500 in cost of its budget of 1000 tokens and 0.001500"
            ),
            "{spent}"
        );
        assert!(Budget::default().is_unlimited());
        assert!(Budget::default()
            .check(&sid(1), &total(u64::MAX, u64::MAX))
            .is_ok());
    }
}
