//! Check-quorum: a leader that has not heard from a quorum for a while stands aside.
//!
//! openraft gives every append-entries its heartbeat interval as a hard deadline. A leader
//! whose link is slow (a round trip above the heartbeat interval) sees every append time out,
//! so nothing commits; yet its followers still receive those appends, late, and each one resets
//! their election timers, so they never elect a leader that could commit: the registry stalls
//! for as long as the link is slow (seen in `tests/z3_voter_network_faults.rs`: 300 ms each
//! way on the leader's link, no write for the whole fault).
//!
//! openraft 0.10 has a check-quorum of its own (a leader lease that refuses proposals, and
//! with `quorum_loss_probe_interval` its heartbeats pause), but the leader still sends its
//! uncommitted entries and those keep resetting the followers' timers: with this module off
//! and openraft's probe on, the same z3 fault gave up all of its spawns and lasted 61 s; with
//! it, one gave up and the fault healed after 4.7 s (ARCHITECTURE.md, the Raft RPC section).
//!
//! What etcd calls CheckQuorum, done here in the network layer: a leader that has had no
//! acknowledgement from a quorum for [`QuorumTimes::lost_after`] stops sending append-entries
//! (the RPC answers `Unreachable` at once). Its followers' election timers then fire, they elect
//! a leader among themselves, and the first message of the new term that reaches the old leader
//! makes it a follower again.
//!
//! The standing aside is bounded: after [`QuorumTimes::aside_for`] the leader sends again for
//! [`QuorumTimes::probe_for`] (a probe), then stands aside again if still no quorum answered.
//! Without the probe the cluster could deadlock for good (seen in CI, `bench_smoke`'s scale
//! catch-up with one voter down): the follower that lost the leader for a moment has a shorter
//! log than the leader (the entries the leader appended but could not commit), so the leader
//! refuses it every vote (Raft's log check comes before the term), and since openraft only
//! updates the leader's vote for a candidate whose log is as long, the leader stays leader,
//! standing aside for ever, and nobody can win. A probe's append reaches that candidate, whose
//! answer carries its higher term; the old leader steps down, and the election that follows is
//! won by the member with the longest log.
//!
//! [`next_phase`] is the rule (a pure function over [`Phase`]); `watch_quorum` applies it to
//! the member's metrics and the time, and sets the flag the network reads ([`StandAside`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::ServerState;
use tokio::sync::watch;

use crate::raft_types::{millis_since_quorum_ack, RegistryRaft};

/// The three durations of the rule, all derived from the longest election timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuorumTimes {
    /// How long a leader goes without a quorum's acknowledgement before it stands aside.
    pub lost_after: Duration,
    /// How long it stands aside before it probes: long enough for a follower's election timer
    /// to fire and a vote round to finish.
    pub aside_for: Duration,
    /// How long a probe sends append-entries: several heartbeats, so an answer (an
    /// acknowledgement, or a higher term) can come back.
    pub probe_for: Duration,
}

impl QuorumTimes {
    /// Twice the longest election timeout to lose the quorum (a follower merely slow for one
    /// timeout does not cost the cluster its leader) and to stand aside, one to probe.
    pub fn for_election_timeout(election_timeout_max: Duration) -> QuorumTimes {
        QuorumTimes {
            lost_after: election_timeout_max * 2,
            aside_for: election_timeout_max * 2,
            probe_for: election_timeout_max,
        }
    }
}

/// Where a member stands in the rule. Times are milliseconds on the caller's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Sends append-entries as usual (every member that is not a leader without its quorum).
    Sending,
    /// A leader without its quorum since `since_ms`: append-entries withheld.
    Aside {
        /// When it stood aside.
        since_ms: u64,
    },
    /// A leader still without its quorum, sending again since `since_ms` to find out whether
    /// one answers (or a member with a higher term, which makes it step down).
    Probing {
        /// When the probe began.
        since_ms: u64,
    },
}

impl Phase {
    /// Whether append-entries are withheld in this phase.
    pub fn withholds_appends(self) -> bool {
        match self {
            Phase::Aside { .. } => true,
            Phase::Sending | Phase::Probing { .. } => false,
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The phase after `phase` for a member in `state`, whose last quorum acknowledgement was
/// `millis_since_quorum_ack` ago (openraft's metric; `None` when it is not a leader or never
/// heard one), at `now_ms`.
pub fn next_phase(
    phase: Phase,
    state: ServerState,
    millis_since_quorum_ack: Option<u64>,
    now_ms: u64,
    times: QuorumTimes,
) -> Phase {
    let lost = match state {
        ServerState::Leader => millis_since_quorum_ack.is_some_and(|m| m >= ms(times.lost_after)),
        ServerState::Learner
        | ServerState::Follower
        | ServerState::Candidate
        | ServerState::Shutdown => false,
    };
    if !lost {
        return Phase::Sending;
    }
    match phase {
        Phase::Sending => Phase::Aside { since_ms: now_ms },
        Phase::Aside { since_ms } if now_ms.saturating_sub(since_ms) >= ms(times.aside_for) => {
            Phase::Probing { since_ms: now_ms }
        }
        Phase::Probing { since_ms } if now_ms.saturating_sub(since_ms) >= ms(times.probe_for) => {
            Phase::Aside { since_ms: now_ms }
        }
        Phase::Aside { .. } | Phase::Probing { .. } => phase,
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

/// Applies [`next_phase`] to `raft`'s metrics as they change (openraft reports them at every
/// turn of its loop, heartbeat ticks included) and at least every tenth of
/// [`QuorumTimes::probe_for`], until `stop`.
pub(crate) async fn watch_quorum(
    raft: RegistryRaft,
    flag: StandAside,
    times: QuorumTimes,
    mut stop: watch::Receiver<bool>,
) {
    let mut metrics = raft.metrics();
    let started = tokio::time::Instant::now();
    let tick = (times.probe_for / 10).max(Duration::from_millis(10));
    let mut phase = Phase::Sending;
    loop {
        let (state, since, term) = {
            let m = metrics.borrow_watched();
            (m.state, millis_since_quorum_ack(&m), m.current_term)
        };
        let now_ms = ms(started.elapsed());
        let next = next_phase(phase, state, since, now_ms, times);
        if next != phase {
            match next {
                Phase::Aside { .. } if phase == Phase::Sending => tracing::warn!(
                    term,
                    since_ms = since,
                    "leader without a quorum's acknowledgement: standing aside (no more append-entries) so the others elect a leader"
                ),
                Phase::Aside { .. } => tracing::warn!(
                    term,
                    since_ms = since,
                    "the probe found no quorum: standing aside again"
                ),
                Phase::Probing { .. } => tracing::info!(
                    term,
                    since_ms = since,
                    "still leader without a quorum after standing aside: probing (sending append-entries again)"
                ),
                Phase::Sending => tracing::info!(term, ?state, "no longer standing aside"),
            }
        }
        phase = next;
        flag.set(phase.withholds_appends());
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(tick) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMES: QuorumTimes = QuorumTimes {
        lost_after: Duration::from_millis(1_200),
        aside_for: Duration::from_millis(1_200),
        probe_for: Duration::from_millis(600),
    };

    fn leader(phase: Phase, since_ack: Option<u64>, now_ms: u64) -> Phase {
        next_phase(phase, ServerState::Leader, since_ack, now_ms, TIMES)
    }

    #[test]
    fn g1_times_follow_the_longest_election_timeout() {
        assert_eq!(
            QuorumTimes::for_election_timeout(Duration::from_millis(600)),
            TIMES
        );
    }

    #[test]
    fn g1_a_leader_without_a_quorum_for_twice_the_election_timeout_stands_aside() {
        assert_eq!(
            leader(Phase::Sending, Some(1_200), 5_000),
            Phase::Aside { since_ms: 5_000 }
        );
        assert_eq!(
            leader(Phase::Sending, Some(60_000), 7),
            Phase::Aside { since_ms: 7 }
        );
        assert!(Phase::Aside { since_ms: 7 }.withholds_appends());
    }

    #[test]
    fn g1_a_leader_that_hears_its_quorum_or_is_new_keeps_sending() {
        assert_eq!(leader(Phase::Sending, Some(0), 10), Phase::Sending);
        assert_eq!(leader(Phase::Sending, Some(1_199), 10), Phase::Sending);
        assert_eq!(leader(Phase::Sending, None, 10), Phase::Sending);
        assert!(!Phase::Sending.withholds_appends());
    }

    #[test]
    fn g1_only_a_leader_stands_aside_and_stepping_down_ends_it() {
        for state in [
            ServerState::Follower,
            ServerState::Candidate,
            ServerState::Learner,
            ServerState::Shutdown,
        ] {
            for phase in [
                Phase::Sending,
                Phase::Aside { since_ms: 0 },
                Phase::Probing { since_ms: 0 },
            ] {
                assert_eq!(
                    next_phase(phase, state, Some(60_000), 100, TIMES),
                    Phase::Sending,
                    "{state:?} {phase:?}"
                );
            }
        }
    }

    #[test]
    fn g1_a_leader_aside_probes_after_a_while_so_a_candidate_with_a_shorter_log_can_reach_it() {
        // The CI deadlock: the leader stays leader (it refuses the shorter-logged candidate its
        // vote), so it must send again at some point, or nobody ever wins.
        let aside = Phase::Aside { since_ms: 1_000 };
        assert_eq!(leader(aside, Some(5_000), 2_199), aside);
        let probing = leader(aside, Some(5_000), 2_200);
        assert_eq!(probing, Phase::Probing { since_ms: 2_200 });
        assert!(!probing.withholds_appends());
        // Still no quorum after the probe: aside again, and so on, each bounded.
        assert_eq!(leader(probing, Some(6_000), 2_799), probing);
        assert_eq!(
            leader(probing, Some(6_000), 2_800),
            Phase::Aside { since_ms: 2_800 }
        );
    }

    #[test]
    fn g1_a_quorum_heard_while_probing_or_aside_ends_the_standing_aside() {
        assert_eq!(
            leader(Phase::Probing { since_ms: 10 }, Some(3), 20),
            Phase::Sending
        );
        assert_eq!(
            leader(Phase::Aside { since_ms: 10 }, Some(3), 20),
            Phase::Sending
        );
    }

    #[test]
    fn g1_a_clock_that_reads_earlier_does_not_panic_or_end_a_phase() {
        let aside = Phase::Aside { since_ms: 1_000 };
        assert_eq!(leader(aside, Some(5_000), 0), aside);
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
