//! A node's lease, as the node itself sees it (K1, R1; issue 12): when it must fence itself,
//! and when a gap between renewals means its sessions may have moved.
//!
//! The registry grants a node's lease for `lease` from the time the node writes in its
//! heartbeat (the caller's clock); another node may claim the sessions of a node whose lease
//! ran out. These rules let the node act before and after that: it takes no message once its
//! lease is near its end ([`holds_lease`], [`lease_margin_ms`]), and after a renewal that may
//! have come too late ([`lapsed`], [`renewed_too_late`], [`fence_after_ms`]) it checks its
//! agents' placements before it takes any again. The shell (`lineage-host`'s `fence.rs`) keeps
//! the times and does the checks.

/// The gap between two renewals after which the placements are checked: the lease, or the
/// control request timeout if that is shorter. A drain gives up on a node that does not answer
/// within its request timeout and disposes that node's sessions in the registry alone; with a
/// lease longer than that timeout (e.g. 30 s against 10 s), a node stopped for 15 s would not
/// see a lapse and would keep the agents of sessions drained meanwhile.
pub fn fence_after_ms(lease_ms: u64, request_timeout_ms: u64) -> u64 {
    lease_ms.min(request_timeout_ms.max(1))
}

/// True when the lease may have expired between the renewals at `previous_ms` and `now_ms`
/// (`previous_ms` 0: none before, nothing to check).
pub fn lapsed(previous_ms: u64, now_ms: u64, lease_ms: u64) -> bool {
    previous_ms != 0 && now_ms.saturating_sub(previous_ms) >= lease_ms
}

/// How long before its lease runs out a node stops taking inbox messages: a tenth of the
/// lease, so that clocks a little apart and a message in hand do not overlap a claim made at
/// the expiry by another node.
pub fn lease_margin_ms(lease_ms: u64) -> u64 {
    lease_ms / 10
}

/// True when a lease held until `until_ms` (0: none yet) still holds at `now_ms` with
/// `margin_ms` to spare.
pub fn holds_lease(until_ms: u64, now_ms: u64, margin_ms: u64) -> bool {
    now_ms.saturating_add(margin_ms) < until_ms
}

/// True when a renewal that returned at `done_ms` may have come after the lease held until
/// `held_until_ms` ran out (0: none held yet): the registry may have shown the node dead in
/// between, and another node may have claimed its sessions, even though the renewals were
/// written less than a lease apart (a write that took long: a registry election).
pub fn renewed_too_late(held_until_ms: u64, done_ms: u64) -> bool {
    held_until_ms != 0 && done_ms >= held_until_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k1_a_node_stops_taking_messages_a_tenth_of_its_lease_before_it_runs_out() {
        assert_eq!(lease_margin_ms(2_000), 200);
        assert!(!holds_lease(0, 5, 0), "no renewal yet");
        // Renewed at 10,000 with a 2 s lease: held until 12,000, taken until 11,800.
        assert!(holds_lease(12_000, 11_799, lease_margin_ms(2_000)));
        assert!(!holds_lease(12_000, 11_800, lease_margin_ms(2_000)));
        assert!(!holds_lease(12_000, 40_000, lease_margin_ms(2_000)));
        assert!(!holds_lease(12_000, u64::MAX, 200), "no overflow");
    }

    #[test]
    fn k1_a_renewal_back_after_the_lease_ran_out_counts_as_a_lapse() {
        assert!(!renewed_too_late(0, 50_000), "the first renewal");
        assert!(!renewed_too_late(12_000, 11_999));
        assert!(renewed_too_late(12_000, 12_000));
        // Written at 11,500 (less than a lease after the one at 10,000), back at 13,000: the
        // registry may have shown the node dead from 12,000 until it applied the renewal.
        assert!(!lapsed(10_000, 11_500, 2_000));
        assert!(renewed_too_late(12_000, 13_000));
    }

    #[test]
    fn k1_a_lease_lapses_after_a_gap_of_a_whole_lease() {
        assert!(!lapsed(0, 50_000, 2_000), "first renewal");
        assert!(!lapsed(10_000, 11_999, 2_000));
        assert!(lapsed(10_000, 12_000, 2_000));
        assert!(lapsed(10_000, 40_000, 2_000));
        assert!(!lapsed(10_000, 9_000, 2_000), "a clock step back is no gap");
    }

    #[test]
    fn the_fence_runs_after_the_lease_or_a_drains_request_timeout_whichever_is_shorter() {
        assert_eq!(fence_after_ms(3_000, 10_000), 3_000, "the shipped defaults");
        assert_eq!(fence_after_ms(30_000, 10_000), 10_000, "a long lease");
        // A node stopped 15 s with a 30 s lease: a drain gave up on it after 10 s.
        assert!(lapsed(10_000, 25_000, fence_after_ms(30_000, 10_000)));
        assert_eq!(fence_after_ms(3_000, 0), 1, "never zero");
    }
}
