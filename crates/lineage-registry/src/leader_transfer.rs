//! Leader transfer on shutdown (G4): a voter that is leader hands leadership to an up-to-date
//! voter before it stops, so a rolling restart of the voters costs no election timeout.
//!
//! [`successor`] is the rule (pure): the other voter whose log matches furthest, the lowest id
//! on a tie. [`hand_over`] applies it: openraft's `transfer_leader` (the leader stops taking
//! writes, tells every member; the successor campaigns as soon as its log reaches the leader's
//! last entry), then waits until another member leads, within a bound. Writes that arrive
//! meanwhile are answered "not leader" with no hint and retried by the clients, like those
//! during an election.

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::ServerState;

use crate::error::RegistryError;
use crate::raft_types::{LogId, Metrics, RegistryRaft};

/// Whom `me` hands leadership to: among `voters` other than itself, the one whose log matches
/// furthest (`matched`, the leader's replication progress), the lowest id on a tie; `None`
/// when there is no other voter.
pub fn successor(
    me: u64,
    voters: impl IntoIterator<Item = u64>,
    matched: &BTreeMap<u64, Option<LogId>>,
) -> Option<u64> {
    voters
        .into_iter()
        .filter(|v| *v != me)
        // The furthest log first; among equal logs the highest `Reverse(id)`, the lowest id.
        .map(|v| (matched.get(&v).cloned().flatten(), std::cmp::Reverse(v)))
        .max()
        .map(|(_, std::cmp::Reverse(v))| v)
}

/// What [`hand_over`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOver {
    /// This member was not the leader: nothing to hand over.
    NotLeader,
    /// The only voter: nobody to hand over to.
    NoOtherVoter,
    /// Member `to` leads now.
    HandedTo(u64),
    /// Asked `to` to take over, but no other leader was seen within the bound (the member
    /// stops anyway; the others elect one after their election timeout, as after a crash).
    NotTakenWithin(u64),
}

fn from_metrics(m: &Metrics) -> Option<u64> {
    if m.state != ServerState::Leader {
        return None;
    }
    let voters = m.membership_config.membership().voter_ids();
    let empty = BTreeMap::new();
    successor(m.id, voters, m.replication.as_ref().unwrap_or(&empty))
}

/// Hands leadership over if this member leads, waiting at most `within` for another leader.
pub async fn hand_over(raft: &RegistryRaft, within: Duration) -> Result<HandOver, RegistryError> {
    let mut metrics = raft.metrics();
    let (me, to) = {
        let m = metrics.borrow_watched();
        if m.state != ServerState::Leader {
            return Ok(HandOver::NotLeader);
        }
        (m.id, from_metrics(&m))
    };
    let Some(to) = to else {
        return Ok(HandOver::NoOtherVoter);
    };
    raft.trigger()
        .transfer_leader(to)
        .await
        .map_err(|e| RegistryError::Raft(e.to_string()))?;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let leader = metrics.borrow_watched().current_leader;
        if let Some(leader) = leader.filter(|l| *l != me) {
            return Ok(HandOver::HandedTo(leader));
        }
        match tokio::time::timeout_at(deadline, metrics.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return Ok(HandOver::NotTakenWithin(to)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::impls::leader_id_adv::LeaderId;

    fn at(index: u64) -> Option<LogId> {
        Some(LogId::new(
            LeaderId {
                term: 2,
                node_id: 1,
            },
            index,
        ))
    }

    #[test]
    fn g4_the_voter_furthest_along_takes_over() {
        let matched = BTreeMap::from([(2, at(7)), (3, at(9))]);
        assert_eq!(successor(1, [1, 2, 3], &matched), Some(3));
    }

    #[test]
    fn g4_a_tie_goes_to_the_lowest_id_and_an_unknown_progress_counts_least() {
        let matched = BTreeMap::from([(2, at(9)), (3, at(9)), (4, None)]);
        assert_eq!(successor(1, [1, 4, 3, 2], &matched), Some(2));
        assert_eq!(successor(1, [1, 4, 5], &matched), Some(4));
    }

    #[test]
    fn g4_alone_there_is_nobody_to_hand_over_to() {
        assert_eq!(successor(1, [1], &BTreeMap::new()), None);
        assert_eq!(successor(1, [], &BTreeMap::new()), None);
    }

    #[test]
    fn g4_learners_are_not_candidates() {
        // Only voters are passed in: a learner far ahead is not chosen.
        let matched = BTreeMap::from([(2, at(3)), (9, at(100))]);
        assert_eq!(successor(1, [1, 2], &matched), Some(2));
    }
}
