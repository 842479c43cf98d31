//! The lifecycle vocabulary of a session (X2, S1, K1), shared by the registry and the host, and
//! the pure decision of what to do with births that never started (issue 10, fault 3).
//!
//! A lineage node registers a session it hosts only once the session's creation window is
//! durable in its log (`register_session` with `hosted`): the commit is the birth, and the
//! session is `running` at once. A registration that is not `hosted` (a registry client that
//! does not host the session) is born `starting` and becomes `running` once the node it was
//! placed on confirms the start. Then it moves between `running`, `waiting` and `settled` as
//! its agent takes turns, and ends `disposed`:
//!
//! ```text
//! (hosted birth) -----------> running
//! starting --confirm_start--> running <--> waiting
//!    |                          |  ^          |
//!    |                          v  | resume   v
//!    |                        settled <-------+
//!    +--expire_start / dispose--> disposed <-- (any, dispose)
//! ```
//!
//! A birth whose start is not confirmed by its deadline ([`DEFAULT_START_WITHIN_MS`] after the
//! birth unless the registration says otherwise) is an *overdue birth*: the sweeper disposes it
//! and tells its parent, with the notice and `subagent/end` that [`expire_births`] decides.
//! This is Dapr's zombie child (dapr#9258) closed: a birth that never started never looks alive.

use serde::{Deserialize, Serialize};

use crate::activation::ActivationState;
use crate::descriptor::{SubagentDescriptor, SubagentShape};
use crate::ids::{NodeId, RunId, SessionId};
use crate::messages::{StopReason, SubagentRunEndInfo, SubagentSettled};

/// How long after its birth a session must be hosted (its start confirmed) before the sweeper
/// disposes it as never started: 30 s of the callers' clock.
pub const DEFAULT_START_WITHIN_MS: u64 = 30_000;

/// The state of a session as the registry records it (X2). Wire names: `starting`, `running`,
/// `waiting`, `settled`, `disposed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Registered (born), not yet hosted by any node: its start is not confirmed. Left only by
    /// `confirm_start` (to `running`), `expire_start` or `dispose`.
    Starting,
    /// Hosted and taking turns.
    Running,
    /// Hosted and idle, but owned children remain.
    Waiting,
    /// Finished; the settlement was (or will be) delivered to the parent. Resumable.
    Settled,
    /// Gone for good: no host, no new children, never re-registered.
    Disposed,
}

impl SessionState {
    /// Every state, in lifecycle order.
    pub const ALL: [SessionState; 5] = [
        SessionState::Starting,
        SessionState::Running,
        SessionState::Waiting,
        SessionState::Settled,
        SessionState::Disposed,
    ];

    /// The wire name (`starting`, `running`, `waiting`, `settled`, `disposed`).
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Starting => "starting",
            SessionState::Running => "running",
            SessionState::Waiting => "waiting",
            SessionState::Settled => "settled",
            SessionState::Disposed => "disposed",
        }
    }

    /// True for `running` and `waiting`: a node hosts it (or did, until its lease expired), so
    /// requests go to that node and re-adoption or takeover may resume it. A `starting` session
    /// is not active: no node hosts it yet, and only the sweeper acts on it.
    pub fn is_active(self) -> bool {
        match self {
            SessionState::Running | SessionState::Waiting => true,
            SessionState::Starting | SessionState::Settled | SessionState::Disposed => false,
        }
    }
}

/// The registry state an activation state is recorded as (the engine's vocabulary is a subset).
impl From<ActivationState> for SessionState {
    fn from(state: ActivationState) -> Self {
        match state {
            ActivationState::Running => SessionState::Running,
            ActivationState::Waiting => SessionState::Waiting,
            ActivationState::Settled => SessionState::Settled,
        }
    }
}

/// A `starting` session as the sweeper sees it (from its registry record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverdueBirth {
    /// The session.
    pub session: SessionId,
    /// Its parent (`None`: a top-level session).
    pub parent: Option<SessionId>,
    /// Its descriptor, when readable (a child's: shape, label, provider).
    pub descriptor: Option<SubagentDescriptor>,
    /// The run it was born with, if any.
    pub run: Option<RunId>,
    /// The node it was placed on, if any.
    pub node: Option<NodeId>,
    /// When it was born (caller's clock).
    pub created_at_ms: u64,
    /// When its start was due.
    pub start_deadline_ms: u64,
}

/// What the sweeper does with one overdue birth, in this order: dispose it (`expire_start`),
/// and only once that committed publish `end` on the parent's end subject, then `notice` into
/// the parent's inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BirthExpiry {
    /// The session to dispose.
    pub session: SessionId,
    /// `subagent/end` (stop reason `failed`) for a child born with a run.
    pub end: Option<SubagentRunEndInfo>,
    /// The settlement notice for a continuable child's parent: seq 1 (the child never sent
    /// anything, so its first outbox sequence), stop reason `failed`, `Nats-Msg-Id
    /// <child>-1` as the child itself would have used.
    pub notice: Option<SubagentSettled>,
}

/// The births of `candidates` overdue at `now_ms` (start deadline at or before it), oldest
/// deadline first, each with what to publish once it is disposed. A one-shot child's parent
/// gets no inbox notice (a one-shot's result goes to the caller that started it, never to the
/// parent's inbox); a top-level session gets neither notice nor `subagent/end`.
pub fn expire_births(candidates: &[OverdueBirth], now_ms: u64) -> Vec<BirthExpiry> {
    let mut due: Vec<&OverdueBirth> = candidates
        .iter()
        .filter(|b| b.start_deadline_ms <= now_ms)
        .collect();
    due.sort_by(|a, b| (a.start_deadline_ms, &a.session).cmp(&(b.start_deadline_ms, &b.session)));
    due.into_iter()
        .map(|b| {
            let within = b.start_deadline_ms.saturating_sub(b.created_at_ms);
            expire_one(b, now_ms, &never_started_summary(&label_of(b), within))
        })
        .collect()
}

/// A birth cut short: registered `running` by its hosting node, whose creation window never
/// reached the log (the node stopped between the two, which it writes at once). Its log holds
/// nothing to resume, so it is disposed like an overdue birth, and its parent is told the same
/// way, with why.
pub fn cut_short_birth(birth: &OverdueBirth, now_ms: u64) -> BirthExpiry {
    expire_one(birth, now_ms, &cut_short_summary(&label_of(birth)))
}

/// A one-shot run cut short by its node's stop: the node's re-adoption (or a takeover) finds
/// it `running` there, and a one-shot is never resumed. Its caller disposes it when it learns
/// of the stop from its spawn reply; when that caller stopped with the same node, no one
/// would, so the adoption disposes it and publishes its end (a one-shot's parent gets no inbox
/// notice: it learns from the spawn reply, and a parent cut short with it has none pending).
/// Issue 12: found by `lineage chaos` (a one-shot left `running` for 30 minutes after its
/// node, its caller's too, was SIGKILLed).
pub fn cut_short_run(birth: &OverdueBirth, now_ms: u64) -> BirthExpiry {
    let summary = format!(
        "subagent {} stopped: its node stopped during its run",
        label_of(birth)
    );
    expire_one(birth, now_ms, &summary)
}

/// What a parent calls a child: its descriptor's label, else its session id.
fn label_of(birth: &OverdueBirth) -> String {
    birth
        .descriptor
        .as_ref()
        .and_then(|d| d.label.clone())
        .unwrap_or_else(|| birth.session.to_string())
}

/// The one line a parent reads for a birth cut short.
pub fn cut_short_summary(label: &str) -> String {
    format!("subagent {label} never started: its node stopped before its log was written")
}

fn expire_one(birth: &OverdueBirth, now_ms: u64, summary: &str) -> BirthExpiry {
    let end = match (&birth.parent, &birth.descriptor, &birth.run, &birth.node) {
        (Some(parent), Some(descriptor), Some(run), Some(node)) => Some(SubagentRunEndInfo {
            run_id: run.clone(),
            provider: descriptor.provider.clone(),
            child_id: birth.session.clone(),
            parent_session_id: parent.clone(),
            local: false,
            shape: descriptor.mode,
            node: node.clone(),
            stop_reason: StopReason::Failed,
            last_assistant_message: None,
            at_ms: now_ms,
        }),
        _ => None,
    };
    // A one-shot's caller learns from the spawn reply, not the inbox; a child without a
    // readable descriptor is still a continuable birth for its parent.
    let shape = birth
        .descriptor
        .as_ref()
        .map_or(SubagentShape::Continuable, |d| d.mode);
    let notice = match (&birth.parent, shape) {
        (Some(parent), SubagentShape::Continuable) => Some(SubagentSettled::new(
            birth.session.clone(),
            parent.clone(),
            1,
            summary,
            StopReason::Failed,
            None,
            now_ms,
        )),
        (Some(_), SubagentShape::OneShot) | (None, _) => None,
    };
    BirthExpiry {
        session: birth.session.clone(),
        end,
        notice,
    }
}

/// The one line a parent reads for a child that never started, e.g. `subagent reviewer never
/// started: no node hosted it within 30s`.
pub fn never_started_summary(label: &str, within_ms: u64) -> String {
    let within = if within_ms.is_multiple_of(1000) {
        format!("{}s", within_ms / 1000)
    } else {
        format!("{within_ms}ms")
    };
    format!("subagent {label} never started: no node hosted it within {within}")
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ids::sid;

    fn descriptor(mode: SubagentShape, label: Option<&str>) -> SubagentDescriptor {
        SubagentDescriptor {
            provider: "script".into(),
            label: label.map(str::to_owned),
            mode,
            tool_filter: None,
            persona: None,
        }
    }

    fn birth(n: u32, parent: Option<u32>, mode: SubagentShape, deadline: u64) -> OverdueBirth {
        OverdueBirth {
            session: sid(n),
            parent: parent.map(sid),
            descriptor: parent.map(|_| descriptor(mode, Some("reviewer"))),
            run: Some(RunId::parse("01ARZ3NDEKTSV4RRFFQ69G5FAV").unwrap()),
            node: Some(NodeId::parse("node-2").unwrap()),
            created_at_ms: deadline.saturating_sub(30_000),
            start_deadline_ms: deadline,
        }
    }

    #[test]
    fn x2_state_names_and_activity() {
        let names: Vec<&str> = SessionState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            ["starting", "running", "waiting", "settled", "disposed"]
        );
        for s in SessionState::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<SessionState>(&json).unwrap(), s);
        }
        let active: Vec<SessionState> = SessionState::ALL
            .into_iter()
            .filter(|s| s.is_active())
            .collect();
        assert_eq!(active, [SessionState::Running, SessionState::Waiting]);
        assert_eq!(
            SessionState::from(ActivationState::Waiting),
            SessionState::Waiting
        );
        assert_eq!(
            SessionState::from(ActivationState::Settled).as_str(),
            ActivationState::Settled.as_str()
        );
    }

    #[test]
    fn s1_only_births_past_their_deadline_expire_oldest_first() {
        let births = [
            birth(3, Some(1), SubagentShape::Continuable, 50_000),
            birth(2, Some(1), SubagentShape::Continuable, 40_000),
            birth(4, Some(1), SubagentShape::Continuable, 40_001),
        ];
        assert!(expire_births(&births, 39_999).is_empty());
        let at: Vec<SessionId> = expire_births(&births, 40_000)
            .into_iter()
            .map(|e| e.session)
            .collect();
        assert_eq!(at, [sid(2)]);
        let all: Vec<SessionId> = expire_births(&births, 60_000)
            .into_iter()
            .map(|e| e.session)
            .collect();
        assert_eq!(all, [sid(2), sid(4), sid(3)]);
    }

    #[test]
    fn m2_a_continuable_child_that_never_started_tells_its_parent_once_as_seq_1() {
        let expiry = expire_births(
            &[birth(2, Some(1), SubagentShape::Continuable, 40_000)],
            41_000,
        )
        .pop()
        .unwrap();
        let notice = expiry.notice.unwrap();
        assert_eq!(notice.sender_session_id, sid(2));
        assert_eq!(notice.parent_session_id, sid(1));
        assert_eq!(notice.seq, 1);
        assert_eq!(notice.dedup_id(), format!("{}-1", sid(2)));
        assert_eq!(notice.stop_reason, StopReason::Failed);
        assert_eq!(
            notice.summary.as_str(),
            "subagent reviewer never started: no node hosted it within 30s"
        );
        assert_eq!(notice.output, None);
        assert_eq!(notice.at_ms, 41_000);
        let end = expiry.end.unwrap();
        assert_eq!(
            (end.child_id, end.parent_session_id, end.stop_reason),
            (sid(2), sid(1), StopReason::Failed)
        );
        assert_eq!(end.shape, SubagentShape::Continuable);
        assert_eq!(end.node.as_str(), "node-2");
    }

    #[test]
    fn s1_m2_a_birth_cut_short_before_its_log_tells_its_parent_why_whatever_its_deadline() {
        // A hosted birth has no start deadline (0): it is not an overdue birth, and
        // `expire_births` would never list it; re-adoption finds it by its empty log.
        let cut = birth(2, Some(1), SubagentShape::Continuable, 0);
        let expiry = cut_short_birth(&cut, 41_000);
        assert_eq!(expiry.session, sid(2));
        let notice = expiry.notice.unwrap();
        assert_eq!((notice.seq, notice.stop_reason), (1, StopReason::Failed));
        assert_eq!(
            notice.summary.as_str(),
            "subagent reviewer never started: its node stopped before its log was written"
        );
        assert_eq!(expiry.end.unwrap().stop_reason, StopReason::Failed);
        let one_shot = cut_short_birth(&birth(3, Some(1), SubagentShape::OneShot, 0), 41_000);
        assert!(one_shot.notice.is_none() && one_shot.end.is_some());
    }

    #[test]
    fn s1_a_one_shot_gets_an_end_but_no_inbox_notice_and_a_root_gets_neither() {
        let one_shot = expire_births(&[birth(2, Some(1), SubagentShape::OneShot, 10)], 10)
            .pop()
            .unwrap();
        assert!(one_shot.notice.is_none());
        assert_eq!(one_shot.end.unwrap().shape, SubagentShape::OneShot);
        let root = expire_births(&[birth(1, None, SubagentShape::Continuable, 10)], 10)
            .pop()
            .unwrap();
        assert_eq!((root.session, root.notice, root.end), (sid(1), None, None));
    }

    #[test]
    fn m2_a_child_without_a_descriptor_still_tells_its_parent_by_id() {
        let mut b = birth(2, Some(1), SubagentShape::Continuable, 1_500);
        b.descriptor = None;
        b.created_at_ms = 0;
        let expiry = expire_births(&[b], 2_000).pop().unwrap();
        assert!(expiry.end.is_none());
        assert_eq!(
            expiry.notice.unwrap().summary.as_str(),
            format!(
                "subagent {} never started: no node hosted it within 1500ms",
                sid(2)
            )
        );
    }
}
