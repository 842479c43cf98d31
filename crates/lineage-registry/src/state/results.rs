//! The idempotency table's bounds: a stored result is kept [`REQUEST_RETENTION_MS`] (pruned as
//! commands are accepted), or less once a cluster forgets older ones
//! ([`Command::ForgetResults`], at least [`MIN_RESULTS_KEPT_MS`], at most [`FORGET_BATCH`] at a
//! time).

use super::*;

/// How long an accepted command's first result is kept for retries: 24 hours of the callers'
/// clock (`at_ms`).
///
/// Each time a command is accepted (and its result stored), the stored results whose `at_ms` is
/// more than this much older than that command's `at_ms` are dropped, oldest first. A retry
/// returns the first result while it is stored, so always within the window; once a command
/// more than the window newer has been accepted, a retry is evaluated as a new command (e.g. a
/// second `register_session` is refused as `duplicate_session`, a second `heartbeat` renews the
/// lease again, a reused id is no longer refused as `request_id_reused`). The cut-off follows the command being applied, not a running
/// maximum, so one command with a far-future clock prunes once but cannot keep every later
/// result from being stored; callers' clocks must still agree to well within the window.
/// Refused commands and retries change nothing, so they prune nothing.
pub const REQUEST_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// The shortest idempotency window a cluster may configure ([`Command::ForgetResults`]): a
/// minute, six times a registry client's default deadline (10 s), within which it retries a
/// write with the same request id.
pub const MIN_RESULTS_KEPT_MS: u64 = 60_000;

/// The most stored results one [`Command::ForgetResults`] forgets (an apply stays short).
pub const FORGET_BATCH: usize = 10_000;

impl RegistryState {
    /// Drops the stored results older than [`REQUEST_RETENTION_MS`] before `now_ms`, oldest
    /// first (amortized: each stored result is removed once).
    pub(super) fn prune_requests(&mut self, now_ms: u64) {
        self.forget_before(now_ms.saturating_sub(REQUEST_RETENTION_MS), usize::MAX);
    }

    /// [`Command::ForgetResults`]: the results kept longer than `kept_ms` at `at_ms`, at most
    /// [`FORGET_BATCH`].
    pub(super) fn forget_results(&mut self, at_ms: u64, kept_ms: u64) -> Refusal {
        if kept_ms < MIN_RESULTS_KEPT_MS {
            return Err(RegistryRefusal::Malformed {
                reason: format!(
                    "forget_results keeps results {kept_ms} ms; keep them at least {MIN_RESULTS_KEPT_MS} ms (a client retries a write with its request id within its deadline)"
                ),
            });
        }
        let (count, more) = self.forget_before(at_ms.saturating_sub(kept_ms), FORGET_BATCH);
        Ok(CommandResponse::ResultsForgotten { count, more })
    }

    /// Drops up to `limit` stored results accepted before `cutoff_ms`, oldest first: how many,
    /// and whether more are due.
    fn forget_before(&mut self, cutoff_ms: u64, limit: usize) -> (u64, bool) {
        let mut count = 0u64;
        while let Some((at_ms, _)) = self.requests_by_age.first() {
            if *at_ms >= cutoff_ms {
                return (count, false);
            }
            if usize::try_from(count).unwrap_or(usize::MAX) >= limit {
                return (count, true);
            }
            if let Some((_, id)) = self.requests_by_age.pop_first() {
                self.requests.remove(&id);
                count += 1;
            }
        }
        (count, false)
    }
}
