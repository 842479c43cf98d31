//! Check-quorum: a leader that has not heard from a quorum for a while stands aside.
//!
//! openraft 0.9 gives every append-entries its heartbeat interval as a hard deadline. A leader
//! whose link is slow (a round trip above the heartbeat interval) sees every append time out,
//! so nothing commits; yet its followers still receive those appends, late, and each one resets
//! their election timers, so they never elect a leader that could commit: the registry stalls
//! for as long as the link is slow (seen in `tests/z3_voter_network_faults.rs`: 300 ms each
//! way on the leader's link, no write for the whole fault).
//!
//! What etcd calls CheckQuorum, done here in the network layer because openraft 0.9 has no
//! step-down or leadership transfer: a leader that has had no acknowledgement from a quorum
//! for [`quorum_lost_after`] stops sending append-entries (the RPC answers `Unreachable` at
//! once). Its followers' election timers then fire, they elect a leader among themselves, and
//! the first message of the new term that reaches the old leader makes it a follower again,
//! which ends the standing aside. A leader that still has its quorum is never affected; a
//! lone voter is its own quorum.
//!
//! [`stands_aside`] is the rule (a pure function); [`watch_quorum`] applies it to the member's
//! metrics and sets the flag the network reads ([`StandAside`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;

use crate::raft_types::RegistryRaft;

/// How long a leader goes without a quorum's acknowledgement before it stands aside: twice the
/// longest election timeout, so a follower that is merely slow for one timeout does not cost
/// the cluster its leader.
pub fn quorum_lost_after(election_timeout_max: Duration) -> Duration {
    election_timeout_max * 2
}

/// Whether a member in `state`, whose last quorum acknowledgement was `millis_since_quorum_ack`
/// ago (openraft's metric; `None` when it is not a leader or never heard one), stops sending
/// append-entries.
pub fn stands_aside(
    state: ServerState,
    millis_since_quorum_ack: Option<u64>,
    after: Duration,
) -> bool {
    let after_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
    match state {
        ServerState::Leader => millis_since_quorum_ack.is_some_and(|ms| ms >= after_ms),
        ServerState::Learner
        | ServerState::Follower
        | ServerState::Candidate
        | ServerState::Shutdown => false,
    }
}

/// The flag the network reads: set while this member stands aside.
#[derive(Debug, Clone, Default)]
pub struct StandAside(Arc<AtomicBool>);

impl StandAside {
    /// Whether append-entries are withheld now.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, on: bool) -> bool {
        self.0.swap(on, Ordering::Relaxed) != on
    }
}

/// Applies [`stands_aside`] to `raft`'s metrics as they change (openraft reports them at every
/// turn of its loop, heartbeat ticks included) until `stop`.
pub(crate) async fn watch_quorum(
    raft: RegistryRaft,
    flag: StandAside,
    after: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut metrics = raft.metrics();
    loop {
        let (state, since, term) = {
            let m = metrics.borrow_and_update();
            (m.state, m.millis_since_quorum_ack, m.current_term)
        };
        let aside = stands_aside(state, since, after);
        if flag.set(aside) {
            if aside {
                tracing::warn!(
                    term,
                    since_ms = since,
                    "leader without a quorum's acknowledgement: standing aside (no more append-entries) so the others elect a leader"
                );
            } else {
                tracing::info!(term, ?state, "no longer standing aside");
            }
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_millis(1_200);

    #[test]
    fn g1_a_leader_without_a_quorum_for_twice_the_election_timeout_stands_aside() {
        assert_eq!(
            quorum_lost_after(Duration::from_millis(600)),
            Duration::from_millis(1_200)
        );
        assert!(stands_aside(ServerState::Leader, Some(1_200), AFTER));
        assert!(stands_aside(ServerState::Leader, Some(60_000), AFTER));
    }

    #[test]
    fn g1_a_leader_that_hears_its_quorum_or_is_new_keeps_sending() {
        assert!(!stands_aside(ServerState::Leader, Some(0), AFTER));
        assert!(!stands_aside(ServerState::Leader, Some(1_199), AFTER));
        assert!(!stands_aside(ServerState::Leader, None, AFTER));
    }

    #[test]
    fn g1_only_a_leader_stands_aside() {
        for state in [
            ServerState::Follower,
            ServerState::Candidate,
            ServerState::Learner,
            ServerState::Shutdown,
        ] {
            assert!(!stands_aside(state, Some(60_000), AFTER), "{state:?}");
        }
    }

    #[test]
    fn g1_the_flag_reports_only_changes() {
        let flag = StandAside::default();
        assert!(!flag.is_set());
        assert!(flag.set(true));
        assert!(!flag.set(true));
        assert!(flag.is_set());
        assert!(flag.set(false));
        assert!(!flag.is_set());
    }
}
