//! Fencing after a lease lapse (K1, R1; issue 12; the rules are `lineage_core::lease`, this is the shell that keeps the times and checks the placements): a node that was stopped or cut off for longer
//! than its lease may find, when it runs again, that other nodes have cold-resumed some of its
//! sessions (they claimed the placement at a higher epoch). Its own agents for those sessions
//! are stale copies: an idle one writes nothing, so the log's sequence check never stops it,
//! and it would keep pulling from the session's inbox consumer beside the new host.
//!
//! So every renewal of the lease checks the gap since the last one ([`lapsed`](lineage_core::lease::lapsed)); after a gap
//! of a whole lease, or of a control request's timeout if that is shorter ([`fence_after_ms`](lineage_core::lease::fence_after_ms):
//! a drain that waited that long for this node disposed its sessions in the registry alone,
//! whatever the lease), each live agent's placement is read from the registry and an agent whose
//! session is placed elsewhere (or no longer exists) stops here, without settling (the session
//! lives on where it moved). So does one whose session was disposed meanwhile: a drain that
//! could not reach this node disposed it in the registry alone, and its agent here would stay
//! live for a disposed session (issue 12's `x1_chaos_trees`, seed 14: a voter SIGSTOPped during
//! a drain). An agent whose record cannot be read stays, and is checked again at the next
//! renewal.
//!
//! That check comes after the fact: a node whose renewals fail keeps running, and other nodes
//! may claim its sessions as soon as its lease expires. So the node also fences itself
//! ([`holds_lease`](lineage_core::lease::holds_lease)): a renewal written at `at_ms` gives a lease until `at_ms + lease` (the
//! registry counts it from the caller's clock), and once that is near, the node's inbox readers
//! take no message until a renewal succeeds again (and, after a lapse, the placements were
//! checked). Without it, a stale agent and the session's new host both read the session's
//! durable inbox consumer for seconds (issue 12: `lineage chaos --seed 24 --duration 30m` left
//! two parents, cold-resumed on node-3 while their stale agents still ran on node-5, without a
//! settlement notice).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use lineage_core::ids::{NodeId, SessionId};
use lineage_core::lease::{fence_after_ms, holds_lease, lapsed, lease_margin_ms, renewed_too_late};
use lineage_registry::types::{SessionRecord, SessionState};

use crate::shared::Shared;

/// Up to this many live agents, a placement check reads each one's record; past it, the
/// node's placements in one walk ([`Shared::fence_moved`]).
pub const READ_EACH_UP_TO: usize = 32;

/// How often a reader waiting for the lease looks again ([`Shared::until_lease_held`]).
const LEASE_LOOK_EVERY: Duration = Duration::from_millis(50);

/// Whether this node's agent for a session must stop, given the session's registry record: it
/// is gone, placed elsewhere, or disposed.
pub fn stale_here(record: Option<&SessionRecord>, here: &NodeId) -> bool {
    match record {
        None => true,
        Some(record) if record.state == SessionState::Disposed => true,
        Some(record) => record
            .placement
            .as_ref()
            .is_none_or(|placement| &placement.node != here),
    }
}

/// How a wait for the lease ended ([`Shared::until_lease_held`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseWait {
    /// This node holds its lease: the agent may take the message.
    Held,
    /// The agent was stopped meanwhile (its session moved, or the node is stopping).
    Stopped,
    /// Not held within the wait given: no renewal succeeded in time.
    TimedOut,
}

impl Shared {
    /// Records a renewal written at `at_ms` that returned at `done_ms`, and returns whether the
    /// lease may have lapsed before it: renewals a whole lease (or request timeout) apart
    /// ([`lapsed`](lineage_core::lease::lapsed)), or this one back only after the lease held ran out ([`renewed_too_late`](lineage_core::lease::renewed_too_late)).
    pub(crate) fn renewal_lapsed(&self, at_ms: u64, done_ms: u64) -> bool {
        let held = self.lease.lease_until_ms.load(Ordering::SeqCst);
        let apart = self.renewed(at_ms);
        apart || renewed_too_late(held, done_ms)
    }

    /// Records a renewal of the lease at `now_ms` and returns whether the lease lapsed since
    /// the previous one.
    fn renewed(&self, now_ms: u64) -> bool {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let after_ms = fence_after_ms(ms(self.cfg.lease), ms(self.cfg.request_timeout));
        let previous = self.lease.last_renewal_ms.swap(now_ms, Ordering::SeqCst);
        lapsed(previous, now_ms, after_ms)
    }

    /// Records that the lease holds until `until_ms` (a renewal written at `until_ms - lease`,
    /// with nothing left to check); it never moves back.
    pub(crate) fn hold_lease_until(&self, until_ms: u64) {
        self.lease
            .lease_until_ms
            .fetch_max(until_ms, Ordering::SeqCst);
    }

    /// Makes the next renewal count as a lapse (the placements could not all be checked).
    pub(crate) fn check_again_at_next_renewal(&self) {
        self.lease.last_renewal_ms.store(1, Ordering::SeqCst);
    }

    /// True while this node surely holds its lease ([`holds_lease`](lineage_core::lease::holds_lease)).
    pub(crate) fn lease_held(&self) -> bool {
        let lease_ms = u64::try_from(self.cfg.lease.as_millis()).unwrap_or(u64::MAX);
        holds_lease(
            self.lease.lease_until_ms.load(Ordering::SeqCst),
            self.now(),
            lease_margin_ms(lease_ms),
        )
    }

    /// Waits until this node holds its lease ([`Shared::lease_held`]), looking every 50 ms,
    /// until `stop` (the placement check after a lapse stopped the agent: its session moved)
    /// or for at most `within` (`None`: as long as it takes).
    pub(crate) async fn until_lease_held(
        &self,
        session: &SessionId,
        stop: &CancellationToken,
        within: Option<Duration>,
    ) -> LeaseWait {
        if self.lease_held() {
            return LeaseWait::Held;
        }
        tracing::debug!(%session, "the lease is not held now; waiting for a renewal");
        let give_up = within.map(|w| tokio::time::Instant::now() + w);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(LEASE_LOOK_EVERY) => {}
                _ = stop.cancelled() => return LeaseWait::Stopped,
            }
            if self.lease_held() {
                return LeaseWait::Held;
            }
            if give_up.is_some_and(|at| tokio::time::Instant::now() >= at) {
                return LeaseWait::TimedOut;
            }
        }
    }

    /// Stops every live agent whose session is placed on another node now, or disposed: the
    /// ones stopped, and whether every placement could be read.
    ///
    /// Up to [`READ_EACH_UP_TO`] live agents, each one's record is read; past it, the node's
    /// undisposed placements are read in one walk (listing pages of the registry's node
    /// index, `sessions_on_node`), and an agent whose session is not among them stops: one
    /// bounded walk a lease instead of a linearizable read per agent.
    ///
    /// What is stopped is the agent that was live when the check began (its stop token is
    /// taken before anything is read), never a later one: a session that moved away and back
    /// here while the registry was read has a new agent here, which the stale answer must not
    /// stop.
    pub(crate) async fn fence_moved(self: &Arc<Self>) -> (Vec<SessionId>, bool) {
        let live: Vec<(SessionId, CancellationToken)> = self
            .live
            .agents
            .lock()
            .map(|agents| {
                agents
                    .iter()
                    .map(|(session, handle)| (session.clone(), handle.stop.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let placed_here: Option<HashSet<SessionId>> = if live.len() > READ_EACH_UP_TO {
            match self.registry.sessions_on_node(self.node().clone()).await {
                Ok(records) => Some(records.iter().map(|r| r.header.id().clone()).collect()),
                Err(e) => {
                    tracing::warn!(error = %e, agents = live.len(), "cannot read the placements of this node's live agents; checked again later");
                    return (Vec::new(), false);
                }
            }
        } else {
            None
        };
        let mut stopped = Vec::new();
        let mut all_checked = true;
        for (session, stop) in live {
            if stop.is_cancelled() {
                continue;
            }
            let (stale, to, disposed) = match &placed_here {
                Some(placed) => (!placed.contains(&session), None, None),
                None => match self.registry.session(session.clone()).await {
                    Ok(record) => (
                        stale_here(record.as_ref(), self.node()),
                        record
                            .as_ref()
                            .and_then(|r| r.placement.as_ref())
                            .map(|p| p.node.to_string()),
                        Some(
                            record
                                .as_ref()
                                .is_some_and(|r| r.state == SessionState::Disposed),
                        ),
                    ),
                    Err(e) => {
                        tracing::warn!(%session, error = %e, "cannot check the placement of a live agent; checked again later");
                        all_checked = false;
                        continue;
                    }
                },
            };
            if !stale || stop.is_cancelled() {
                continue;
            }
            let to = to.unwrap_or_else(|| "elsewhere or nowhere".to_owned());
            tracing::warn!(%session, moved_to = %to, ?disposed, "the session moved or was disposed while its agent ran here; the stale agent stops");
            stop.cancel();
            stopped.push(session);
        }
        (stopped, all_checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k1_x1_an_agent_is_stale_when_its_session_is_gone_placed_elsewhere_or_disposed() {
        use lineage_core::header::SessionHeader;
        use lineage_registry::types::Placement;
        let here = NodeId::parse("node-1").unwrap();
        let header = SessionHeader::top_level(
            SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap(),
            None,
            None,
        );
        let mut record = SessionRecord {
            placement: Some(Placement {
                node: here.clone(),
                epoch: 3,
                released: false,
            }),
            ..SessionRecord::new(header, SessionState::Waiting)
        };
        assert!(!stale_here(Some(&record), &here), "placed here, alive");
        assert!(stale_here(None, &here), "gone (purged)");
        record.state = SessionState::Disposed;
        assert!(
            stale_here(Some(&record), &here),
            "disposed while placed here"
        );
        record.state = SessionState::Settled;
        record.placement = Some(Placement {
            node: NodeId::parse("node-2").unwrap(),
            epoch: 4,
            released: false,
        });
        assert!(stale_here(Some(&record), &here), "moved to node-2");
    }
}
