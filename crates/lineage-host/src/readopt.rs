//! Re-adoption (K1, X2, R1): a node that starts again takes back the sessions the registry
//! still places on it.
//!
//! A node that stopped (crash, restart, upgrade) leaves its sessions `running` or `waiting` in
//! the registry, placed on it, live nowhere. Nothing else would wake a child that was in the
//! middle of a turn: its parent would wait for a settlement that never comes. At start-up the
//! node therefore:
//!
//! 1. lists the undisposed sessions placed on it that are `running` or `waiting`;
//! 2. resumes each here, parents before children (so a child whose parent is live here is owned
//!    by it again), each with the usual claim (compare-and-swap on the epoch: a session another
//!    node took meanwhile is left to it);
//! 3. then, children before parents, tells each resumed agent to recover: a turn cut short was
//!    closed as `interrupted` by the resume, and an agent with nothing to do lets its activation
//!    decide as if its last turn had just finished: it settles (its parent gets the notice,
//!    stop reason `interrupted` for a turn the stop cut short) or waits for its owned children.
//!    Pending input (accepted, not consumed) simply starts a turn.
//!
//! A session the node handed off at a graceful shutdown ([`crate::handoff`]: its placement is
//! `released`, nothing was cut short) is resumed as it was, without step 3: it goes on with
//! whatever input waits for it, and a waiting parent keeps waiting for its children.
//!
//! One-shot runs are never resumed: a `running` one-shot placed on the node died with it, and
//! is disposed (its end published), since its caller may have stopped with the same node and
//! no one else would ([`orphaned_one_shot`]).
//!
//! Settled sessions stay cold: they come back on their next followup, as anywhere. Their
//! outboxes (and those of the sessions resumed) are sent again ([`crate::outbox`]): a report
//! or notice the node logged but had not published when it stopped reaches the parent. `starting`
//! sessions (born, never hosted) are not adopted either ([`adoptable`]): there is no log to
//! resume them from, and the birth sweeper ([`crate::births`]) owns them.
//!
//! Takeover applies the same steps to a node that does not come back: with
//! `HostConfig::takeover_after` set, the live node with the smallest id checks every lease
//! period for nodes whose lease expired longer ago than that, and adopts their `running` and
//! `waiting` sessions here (one sweeper, so the claims do not race each other; the epoch CAS
//! still makes any race harmless). A child cut short mid-turn on a dead node thus settles as
//! `interrupted` and its parent hears of it, instead of waiting for a followup that may never
//! come.

use std::sync::Arc;

use lineage_core::ids::{NodeId, SessionId};
use lineage_registry::types::{NodeRecord, SessionRecord, SessionState};

use crate::agent::cmd::AgentCmd;
use crate::error::HostError;
use crate::host::Host;
use crate::shared::Shared;

/// What a re-adoption did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadoptReport {
    /// Sessions resumed here, parents before children.
    pub resumed: Vec<SessionId>,
    /// Sessions that could not be resumed, with the one-line reason (e.g. another node claimed
    /// them first, or their log cannot be resumed).
    pub failed: Vec<(SessionId, String)>,
}

impl Shared {
    pub(crate) async fn readopt(self: &Arc<Self>) -> Result<ReadoptReport, HostError> {
        self.lifetime.check_resumable()?;
        self.adopt_from(self.cfg.node.clone()).await
    }

    /// One takeover sweep (see the module documentation).
    pub(crate) async fn take_over(
        self: &Arc<Self>,
        after: std::time::Duration,
    ) -> Result<ReadoptReport, HostError> {
        self.lifetime.check_resumable()?;
        let nodes = self.registry.nodes().await?;
        let grace = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        let mut report = ReadoptReport::default();
        for dead in takeover_targets(&nodes, &self.cfg.node, self.now(), grace) {
            let taken = self.adopt_from(dead).await?;
            report.resumed.extend(taken.resumed);
            report.failed.extend(taken.failed);
        }
        Ok(report)
    }

    /// Resumes here the `running`/`waiting` sessions placed on `node`, parents first, then
    /// lets each recover, children first.
    async fn adopt_from(self: &Arc<Self>, node: NodeId) -> Result<ReadoptReport, HostError> {
        let placed: Vec<_> = self
            .registry
            .sessions_on_node(node)
            .await?
            .into_iter()
            .filter(|r| !self.live.is_live(r.header.id()))
            .collect();
        // Reports and notices the node logged and may not have published (issue 12): sent
        // again from the logs, in the background ([`crate::outbox`]).
        self.resend_outboxes(&placed);
        // One-shots whose run died with the node: never resumed, and their caller may have
        // died with it (issue 12), so they are disposed here.
        for record in placed.iter().filter(|r| orphaned_one_shot(r)) {
            self.dispose_orphaned_one_shot(record).await;
        }
        let mut mine: Vec<_> = placed.into_iter().filter(adoptable).collect();
        mine.sort_by_key(|r| (r.depth(), r.header.id().to_string()));
        let mut report = ReadoptReport::default();
        // Sessions their node handed off (graceful shutdown) were cut short nowhere: they go
        // on as they were, with no recovery decision.
        let mut cut_short = Vec::new();
        for record in mine {
            let session = record.header.id().clone();
            match self.resume_local(session.clone()).await {
                Ok(_) => {
                    if !record.placement.as_ref().is_some_and(|p| p.released) {
                        cut_short.push(session.clone());
                    }
                    report.resumed.push(session)
                }
                Err(e) => {
                    tracing::warn!(%session, error = %e, "not adopted");
                    report.failed.push((session, e.to_string()));
                }
            }
        }
        for session in cut_short.iter().rev() {
            let _ = self.live.send(session, AgentCmd::Recover);
        }
        Ok(report)
    }
}

/// True when re-adoption or takeover resumes `record`: `running` or `waiting` (an agent was
/// hosted and cut short), and not a one-shot run (never resumed: the caller that started it
/// disposes it when its start fails). A `starting` birth was never hosted and is the birth
/// sweeper's; a settled one stays cold until a followup. Pure.
pub fn adoptable(record: &SessionRecord) -> bool {
    let hosted = match record.state {
        SessionState::Running | SessionState::Waiting => true,
        SessionState::Starting | SessionState::Settled | SessionState::Disposed => false,
    };
    hosted && !record.is_one_shot()
}

/// True when `record` is a one-shot run that was hosted (`running` or `waiting`): on a node
/// being adopted, its run died with that node. Pure.
pub fn orphaned_one_shot(record: &SessionRecord) -> bool {
    let hosted = match record.state {
        SessionState::Running | SessionState::Waiting => true,
        SessionState::Starting | SessionState::Settled | SessionState::Disposed => false,
    };
    hosted && record.is_one_shot()
}

pub use crate::lease::is_sweeper;

/// The nodes whose sessions `me` takes over at `now_ms`: none unless `me` is the sweeper
/// ([`is_sweeper`]); else every other node whose lease expired at least `grace_ms` ago. Pure:
/// the sweep's decision.
pub fn takeover_targets(
    nodes: &[NodeRecord],
    me: &NodeId,
    now_ms: u64,
    grace_ms: u64,
) -> Vec<NodeId> {
    if !is_sweeper(nodes, me, now_ms) {
        return Vec::new();
    }
    nodes
        .iter()
        .filter(|n| &n.node != me)
        .filter(|n| n.lease_expires_at_ms.saturating_add(grace_ms) <= now_ms)
        .map(|n| n.node.clone())
        .collect()
}

impl Host {
    /// Re-adoption: resumes here the `running` and `waiting` sessions the registry places on
    /// this node and lets each recover (see the module documentation). Run once at start-up,
    /// after the node serves requests.
    pub async fn readopt(&self) -> Result<ReadoptReport, HostError> {
        self.shared.readopt().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, lease_expires_at_ms: u64) -> NodeRecord {
        NodeRecord {
            node: NodeId::parse(id).unwrap(),
            lease_expires_at_ms,
            last_heartbeat_ms: 0,
            info: None,
        }
    }

    fn ids(nodes: &[NodeId]) -> Vec<&str> {
        nodes.iter().map(NodeId::as_str).collect()
    }

    #[test]
    fn k1_only_the_smallest_live_node_sweeps_and_only_after_the_grace() {
        // node-1 live, node-2 live, node-3's lease expired at 1000.
        let nodes = [
            node("node-1", 5000),
            node("node-2", 5000),
            node("node-3", 1000),
        ];
        let me1 = NodeId::parse("node-1").unwrap();
        let me2 = NodeId::parse("node-2").unwrap();
        // Not past the grace yet.
        assert!(takeover_targets(&nodes, &me1, 1400, 500).is_empty());
        // Past it: node-1 sweeps node-3; node-2 does not sweep at all.
        assert_eq!(ids(&takeover_targets(&nodes, &me1, 1500, 500)), ["node-3"]);
        assert!(takeover_targets(&nodes, &me2, 1500, 500).is_empty());
    }

    #[test]
    fn k1_a_dead_smaller_node_does_not_stop_the_next_one_from_sweeping() {
        // node-1 and node-3 are dead; node-2 is the smallest live node.
        let nodes = [
            node("node-1", 1000),
            node("node-2", 9000),
            node("node-3", 800),
        ];
        let me2 = NodeId::parse("node-2").unwrap();
        assert_eq!(
            ids(&takeover_targets(&nodes, &me2, 2000, 500)),
            ["node-1", "node-3"]
        );
        // A node never sweeps itself, even with a stale record of its own lease.
        let nodes = [node("node-2", 100)];
        assert!(takeover_targets(&nodes, &me2, 2000, 500).is_empty());
    }

    #[test]
    fn k1_x2_only_hosted_continuable_sessions_are_adopted_never_a_starting_birth() {
        use lineage_core::header::SessionHeader;
        use lineage_core::ids::SessionId;
        let header = SessionHeader::top_level(
            SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap(),
            None,
            None,
        );
        let mut record = SessionRecord {
            start_deadline_ms: Some(30_000),
            ..SessionRecord::new(header, SessionState::Starting)
        };
        let adopted: Vec<SessionState> = SessionState::ALL
            .into_iter()
            .filter(|s| {
                record.state = *s;
                adoptable(&record)
            })
            .collect();
        assert_eq!(adopted, [SessionState::Running, SessionState::Waiting]);
        record.state = SessionState::Running;
        record.descriptor =
            Some(serde_json::json!({"provider": "script", "mode": "one-shot"}).into());
        assert!(!adoptable(&record), "a one-shot run is never resumed");
    }

    #[test]
    fn k1_the_sweeper_is_the_smallest_live_node() {
        let nodes = [node("node-1", 1000), node("node-2", 9000)];
        let me1 = NodeId::parse("node-1").unwrap();
        let me2 = NodeId::parse("node-2").unwrap();
        assert!(is_sweeper(&nodes, &me1, 500));
        assert!(!is_sweeper(&nodes, &me2, 500));
        // node-1's lease expired: node-2 sweeps (node-1 still thinks it does, as it is alive
        // to itself; the registry's rules make two sweepers harmless).
        assert!(is_sweeper(&nodes, &me2, 2000));
    }

    #[test]
    fn k1_a_node_missing_from_the_list_still_counts_itself() {
        // Its first heartbeat is not visible yet: it is still a candidate sweeper.
        let nodes = [node("node-5", 1000)];
        let me = NodeId::parse("node-4").unwrap();
        assert_eq!(ids(&takeover_targets(&nodes, &me, 2000, 0)), ["node-5"]);
    }
}
