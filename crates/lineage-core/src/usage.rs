//! Usage a hosted agent reports (F-part of issue 11; Q3 builds budgets on it): the context it
//! holds and what it has cost so far, per session, and their sum over a subtree.
//!
//! ACP agents report it as `usage_update` (`used`, `size`, cumulative `cost {amount,
//! currency}`); the latest report of a turn is recorded once, at the turn's end, replacing the
//! session's previous one (both numbers are "so far", not increments). Cost is kept in
//! millionths of its unit, so records stay integers (exact, and equal on every replica).

use serde::{Deserialize, Serialize};

/// One session's latest usage.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SessionUsage {
    /// Tokens in the agent's context now.
    pub used_tokens: u64,
    /// The size of its context window, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_tokens: Option<u64>,
    /// Its cumulative cost in millionths of `currency`, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_micros: Option<u64>,
    /// The cost's unit (an ISO 4217 code such as `USD`, or e.g. `credits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

impl SessionUsage {
    /// Millionths of `amount`, rounded; a negative or non-finite amount is 0.
    pub fn micros(amount: f64) -> u64 {
        if amount.is_finite() && amount > 0.0 {
            (amount * 1_000_000.0).round() as u64
        } else {
            0
        }
    }
}

/// Usage summed over a subtree: tokens, and cost per currency.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UsageTotal {
    /// Sessions that reported usage.
    pub sessions: u64,
    /// Tokens in context, summed.
    pub used_tokens: u64,
    /// Cost in millionths, per currency (sorted by currency).
    pub cost_micros: std::collections::BTreeMap<String, u64>,
}

impl UsageTotal {
    /// Adds one session's usage (saturating).
    pub fn add(&mut self, usage: &SessionUsage) {
        self.sessions += 1;
        self.used_tokens = self.used_tokens.saturating_add(usage.used_tokens);
        if let Some(micros) = usage.cost_micros {
            let currency = usage.currency.clone().unwrap_or_else(|| "?".to_owned());
            let sum = self.cost_micros.entry(currency).or_default();
            *sum = sum.saturating_add(micros);
        }
    }

    /// Takes one session's usage out again (saturating): with [`UsageTotal::add`], how a sum
    /// follows a session whose report was replaced.
    pub fn remove(&mut self, usage: &SessionUsage) {
        self.sessions = self.sessions.saturating_sub(1);
        self.used_tokens = self.used_tokens.saturating_sub(usage.used_tokens);
        if let Some(micros) = usage.cost_micros {
            let currency = usage.currency.clone().unwrap_or_else(|| "?".to_owned());
            if let Some(sum) = self.cost_micros.get_mut(&currency) {
                *sum = sum.saturating_sub(micros);
            }
        }
    }

    /// Adds another sum (saturating): how a purged subtree's usage is carried to its parent.
    pub fn add_total(&mut self, other: &UsageTotal) {
        self.sessions = self.sessions.saturating_add(other.sessions);
        self.used_tokens = self.used_tokens.saturating_add(other.used_tokens);
        for (currency, micros) in &other.cost_micros {
            let sum = self.cost_micros.entry(currency.clone()).or_default();
            *sum = sum.saturating_add(*micros);
        }
    }

    /// True when nothing was summed.
    pub fn is_empty(&self) -> bool {
        self == &UsageTotal::default()
    }

    /// One line: `12,345 tokens, 0.0042 USD` (no cost part when none was reported).
    pub fn render(&self) -> String {
        let mut out = format!("{} tokens", self.used_tokens);
        for (currency, micros) in &self.cost_micros {
            out.push_str(&format!(
                ", {}.{:06} {currency}",
                micros / 1_000_000,
                micros % 1_000_000
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q3_usage_sums_tokens_and_cost_per_currency_exactly() {
        let mut t = UsageTotal::default();
        t.add(&SessionUsage {
            used_tokens: 100,
            size_tokens: Some(1000),
            cost_micros: Some(SessionUsage::micros(0.0012)),
            currency: Some("USD".into()),
        });
        t.add(&SessionUsage {
            used_tokens: 50,
            cost_micros: Some(SessionUsage::micros(0.0001)),
            currency: Some("USD".into()),
            ..Default::default()
        });
        t.add(&SessionUsage {
            used_tokens: 7,
            ..Default::default()
        });
        assert_eq!(t.sessions, 3);
        assert_eq!(t.used_tokens, 157);
        assert_eq!(t.cost_micros["USD"], 1300);
        assert_eq!(t.render(), "157 tokens, 0.001300 USD");
        assert_eq!(SessionUsage::micros(f64::NAN), 0);
        assert_eq!(SessionUsage::micros(-1.0), 0);
    }
}
