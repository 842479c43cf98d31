//! Cold resume (K1): what a node does with a session it was asked to host, given the session's
//! registry record, what it hosts itself and the session's log, before and after it claims the
//! placement.
//!
//! A resume first decides on a **recent** record (any registry member's applied state, no round
//! to a quorum). That record may lag, so it only ever leads to a claim, which the placement's
//! epoch fences: every other outcome on it is [`ResumeStep::ReadAgain`], decided again on a
//! **linearizable** record. Only there does a refusal, a session found live or a birth cut short
//! stand.
//!
//! The node's shell reads the record and the log, asks whether another node is alive when
//! [`host_to_ask`] names one, and does what [`resume_step`] and [`refused_claim_step`] return.

use crate::ids::NodeId;
use crate::lifecycle::SessionState;

/// How fresh the record a resume decides on is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordRead {
    /// Any member's applied state: may lag the leader.
    Recent,
    /// The leader's, after a quorum confirmed that it leads.
    Linearizable,
}

/// The session's log as the resume read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFacts {
    /// The read failed: the resume fails with that error.
    Unreadable,
    /// No events: registered, but its creation window never reached the log (a birth cut
    /// short).
    Empty,
    /// Events to resume from.
    Events,
}

/// What the node knows when it decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeFacts {
    /// The record's state; `None`: the registry knows no such session.
    pub state: Option<SessionState>,
    /// This node hosts the session now.
    pub live_here: bool,
    /// This node is giving birth to the session now.
    pub being_born_here: bool,
    /// The node the record places it on, when [`host_to_ask`] named one and its lease is
    /// current.
    pub live_elsewhere: Option<NodeId>,
    /// The log.
    pub log: LogFacts,
}

/// Why a resume is refused (on a linearizable record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeRefusal {
    /// The registry has no such session.
    Unknown,
    /// Disposed: gone for good.
    Disposed,
    /// Its birth is under way (here, or not yet confirmed by its node).
    Starting,
    /// It runs on this other live node: it is not cold.
    LiveElsewhere(NodeId),
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeStep {
    /// Decide again on a linearizable record (only ever from a recent one).
    ReadAgain,
    /// It is live here already: answer so, claim nothing.
    AlreadyLive,
    /// Refuse, changing nothing.
    Refuse(ResumeRefusal),
    /// Fail with the log's read error.
    LogUnreadable,
    /// Dispose the birth that never reached its log, and refuse.
    DisposeCutShort,
    /// Claim the placement (compare-and-swap on the record's epoch) and host it.
    Claim,
}

/// The node whose liveness decides the resume: the record's host, when the session is active
/// there, that host is another node, and nothing here already decides (live or being born
/// here). `None`: no node needs asking.
pub fn host_to_ask<'a>(
    state: SessionState,
    host: Option<&'a NodeId>,
    me: &NodeId,
    live_here: bool,
    being_born_here: bool,
) -> Option<&'a NodeId> {
    if live_here || being_born_here || !state.is_active() {
        return None;
    }
    host.filter(|h| *h != me)
}

/// The step for `facts`, read as `read` says.
pub fn resume_step(read: RecordRead, facts: &ResumeFacts) -> ResumeStep {
    let decided = |step: ResumeStep| match read {
        RecordRead::Recent => ResumeStep::ReadAgain,
        RecordRead::Linearizable => step,
    };
    let Some(state) = facts.state else {
        return decided(ResumeStep::Refuse(ResumeRefusal::Unknown));
    };
    if facts.live_here {
        return decided(ResumeStep::AlreadyLive);
    }
    if facts.being_born_here {
        // Its log may not be written yet.
        return decided(ResumeStep::Refuse(ResumeRefusal::Starting));
    }
    match state {
        SessionState::Disposed => return decided(ResumeStep::Refuse(ResumeRefusal::Disposed)),
        // Born, not hosted yet: its node confirms the start shortly, or the sweeper disposes
        // it at its deadline; a claim now would host a birth without its log.
        SessionState::Starting => return decided(ResumeStep::Refuse(ResumeRefusal::Starting)),
        SessionState::Running | SessionState::Waiting | SessionState::Settled => {}
    }
    if let Some(node) = &facts.live_elsewhere {
        return decided(ResumeStep::Refuse(ResumeRefusal::LiveElsewhere(
            node.clone(),
        )));
    }
    match facts.log {
        LogFacts::Unreadable => ResumeStep::LogUnreadable,
        LogFacts::Empty => decided(ResumeStep::DisposeCutShort),
        LogFacts::Events => ResumeStep::Claim,
    }
}

/// What a refused claim means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedClaimStep {
    /// Decided on a recent record: decide again on a linearizable one.
    ReadAgain,
    /// Another node won the epoch: the claim is lost to it.
    Lost,
    /// Any other refusal: fail with it.
    Fail,
}

/// The step after the registry refused the claim (`epoch_mismatch`: because the epoch moved).
pub fn refused_claim_step(read: RecordRead, epoch_mismatch: bool) -> RefusedClaimStep {
    match (read, epoch_mismatch) {
        (RecordRead::Recent, _) => RefusedClaimStep::ReadAgain,
        (RecordRead::Linearizable, true) => RefusedClaimStep::Lost,
        (RecordRead::Linearizable, false) => RefusedClaimStep::Fail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(s: &str) -> NodeId {
        NodeId::parse(s).unwrap()
    }

    fn facts(state: Option<SessionState>) -> ResumeFacts {
        ResumeFacts {
            state,
            live_here: false,
            being_born_here: false,
            live_elsewhere: None,
            log: LogFacts::Events,
        }
    }

    /// Every fact that would end the resume without a claim, one at a time.
    fn every_non_claim() -> Vec<(ResumeFacts, ResumeStep)> {
        let mut out = vec![
            (facts(None), ResumeStep::Refuse(ResumeRefusal::Unknown)),
            (
                facts(Some(SessionState::Disposed)),
                ResumeStep::Refuse(ResumeRefusal::Disposed),
            ),
            (
                facts(Some(SessionState::Starting)),
                ResumeStep::Refuse(ResumeRefusal::Starting),
            ),
        ];
        let mut live = facts(Some(SessionState::Running));
        live.live_here = true;
        out.push((live, ResumeStep::AlreadyLive));
        let mut born = facts(Some(SessionState::Running));
        born.being_born_here = true;
        out.push((born, ResumeStep::Refuse(ResumeRefusal::Starting)));
        let mut elsewhere = facts(Some(SessionState::Waiting));
        elsewhere.live_elsewhere = Some(node("node-b"));
        out.push((
            elsewhere,
            ResumeStep::Refuse(ResumeRefusal::LiveElsewhere(node("node-b"))),
        ));
        let mut empty = facts(Some(SessionState::Settled));
        empty.log = LogFacts::Empty;
        out.push((empty, ResumeStep::DisposeCutShort));
        out
    }

    #[test]
    fn k1_a_linearizable_record_decides_every_outcome() {
        for (f, step) in every_non_claim() {
            assert_eq!(resume_step(RecordRead::Linearizable, &f), step, "{f:?}");
        }
        for state in [
            SessionState::Running,
            SessionState::Waiting,
            SessionState::Settled,
        ] {
            assert_eq!(
                resume_step(RecordRead::Linearizable, &facts(Some(state))),
                ResumeStep::Claim
            );
        }
    }

    #[test]
    fn k1_a_recent_record_only_ever_leads_to_a_claim() {
        for (f, _) in every_non_claim() {
            assert_eq!(
                resume_step(RecordRead::Recent, &f),
                ResumeStep::ReadAgain,
                "{f:?}"
            );
        }
        assert_eq!(
            resume_step(RecordRead::Recent, &facts(Some(SessionState::Settled))),
            ResumeStep::Claim
        );
        assert_eq!(
            refused_claim_step(RecordRead::Recent, true),
            RefusedClaimStep::ReadAgain
        );
        assert_eq!(
            refused_claim_step(RecordRead::Recent, false),
            RefusedClaimStep::ReadAgain
        );
        assert_eq!(
            refused_claim_step(RecordRead::Linearizable, true),
            RefusedClaimStep::Lost
        );
        assert_eq!(
            refused_claim_step(RecordRead::Linearizable, false),
            RefusedClaimStep::Fail
        );
    }

    #[test]
    fn k1_refusals_come_before_the_log() {
        // A disposed session whose log cannot be read is refused as disposed, on either read
        // (a recent one asks again first).
        let mut f = facts(Some(SessionState::Disposed));
        f.log = LogFacts::Unreadable;
        assert_eq!(
            resume_step(RecordRead::Linearizable, &f),
            ResumeStep::Refuse(ResumeRefusal::Disposed)
        );
        assert_eq!(resume_step(RecordRead::Recent, &f), ResumeStep::ReadAgain);
        // A resumable record whose log cannot be read fails with the read, on either read.
        let mut f = facts(Some(SessionState::Running));
        f.log = LogFacts::Unreadable;
        assert_eq!(
            resume_step(RecordRead::Recent, &f),
            ResumeStep::LogUnreadable
        );
        assert_eq!(
            resume_step(RecordRead::Linearizable, &f),
            ResumeStep::LogUnreadable
        );
    }

    #[test]
    fn k1_only_an_active_session_placed_elsewhere_asks_its_host() {
        let me = node("node-a");
        let b = node("node-b");
        for state in SessionState::ALL {
            let asked = host_to_ask(state, Some(&b), &me, false, false);
            assert_eq!(asked.is_some(), state.is_active(), "{state:?}");
        }
        assert_eq!(
            host_to_ask(SessionState::Running, Some(&me), &me, false, false),
            None
        );
        assert_eq!(
            host_to_ask(SessionState::Running, None, &me, false, false),
            None
        );
        assert_eq!(
            host_to_ask(SessionState::Running, Some(&b), &me, true, false),
            None
        );
        assert_eq!(
            host_to_ask(SessionState::Running, Some(&b), &me, false, true),
            None
        );
    }
}
