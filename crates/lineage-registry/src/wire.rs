//! Request and reply payloads on the registry subjects (JSON, versioned by shape).

use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, SessionId};
use serde::{Deserialize, Serialize};

use crate::types::{
    ChildSummary, Command, CommandResponse, NodeRecord, RegistryRefusal, SessionRecord,
};

/// How fresh a read must be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// Served by the leader after confirming leadership with a quorum (read index): sees every
    /// write acknowledged before the read began.
    #[default]
    Linearizable,
    /// Served from whichever member answers, from its applied state: may lag.
    Stale,
}

/// A reply on a write subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum WriteReply {
    /// Applied (or refused by a rule, inside the response).
    Done {
        /// The state machine's response.
        response: CommandResponse,
    },
    /// Applied, a write of several commands (a JSON array): one response per command, in
    /// the array's order.
    DoneMany {
        /// The state machine's responses.
        responses: Vec<CommandResponse>,
    },
    /// This member is not the leader; `leader` is its best guess.
    NotLeader {
        /// The leader's Raft id, if known.
        leader: Option<u64>,
    },
    /// The member could not serve the request now (shutting down, no quorum).
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// The most commands one write request may carry (a JSON array of commands on a write
/// subject; see [`crate::RegistryClient::write_many`]).
pub const WRITE_MANY_MAX: usize = 1_000;

/// How every refusal of a write of several commands as a whole begins (malformed, too many,
/// too large), so a client tells them from an older member's refusal of an array it cannot
/// read as one command.
pub const WRITE_MANY_ARRAY: &str = "a write of several command";

/// The most records a [`Query::SubtreePage`] answers with.
pub const SUBTREE_PAGE_MAX: u32 = 1_000;

/// A [`Query::SubtreePage`] reply stops adding records once they would exceed this many bytes of
/// JSON (at least one record is always sent): far below NATS' default max_payload of 1 MiB.
pub const SUBTREE_PAGE_BYTES: usize = 512 * 1024;

/// One query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "query", rename_all = "snake_case")]
pub enum Query {
    /// One session's record.
    Session {
        /// The session.
        session: SessionId,
    },
    /// The subtree under `root`, parents before children, in one reply: past ~2,000 sessions
    /// the reply exceeds NATS' max_payload; prefer [`Query::SubtreePage`] (which
    /// `RegistryClient::subtree` uses).
    Subtree {
        /// The root of the subtree.
        root: SessionId,
    },
    /// One page of the subtree under `root`, in (level below `root`, id) order: parents before
    /// children across pages. Answered with [`QueryResult::Page`].
    SubtreePage {
        /// The root of the subtree.
        root: SessionId,
        /// The last id of the previous page; `None` for the first page.
        #[serde(default)]
        after: Option<SessionId>,
        /// At most this many records (clamped to 1..=[`SUBTREE_PAGE_MAX`]; a page also stops
        /// before [`SUBTREE_PAGE_BYTES`] of records).
        limit: u32,
    },
    /// Is `ancestor` a strict ancestor of `descendant`?
    IsAncestor {
        /// The candidate ancestor.
        ancestor: SessionId,
        /// The candidate descendant.
        descendant: SessionId,
    },
    /// Undisposed sessions placed on a node, all in one answer (from the node index): past
    /// about 2,000 sessions the answer exceeds max_payload and comes back `too_large`;
    /// `RegistryClient::sessions_on_node` walks [`Query::ListSessions`] pages instead.
    SessionsOnNode {
        /// The node.
        node: NodeId,
    },
    /// The `starting` sessions whose start deadline is at or before `now_ms`, oldest first
    /// (the sweeper's page; answered with [`QueryResult::Sessions`]).
    OverdueBirths {
        /// The caller's clock.
        now_ms: u64,
        /// At most this many (clamped to 1..=[`crate::state::OVERDUE_BIRTHS_PAGE`]).
        limit: u32,
    },
    /// The undisposed sessions whose deadline (Q2) is at or before `now_ms`, earliest first
    /// (the deadline sweeper's page; answered with [`QueryResult::Sessions`]).
    OverdueDeadlines {
        /// The caller's clock.
        now_ms: u64,
        /// At most this many (clamped to 1..=[`crate::state::OVERDUE_DEADLINES_PAGE`]).
        limit: u32,
    },
    /// The undisposed sessions whose budget (Q3) is spent (the budget sweeper's page;
    /// answered with [`QueryResult::Sessions`]).
    SpentBudgets {
        /// At most this many (clamped to 1..=[`crate::state::SPENT_BUDGETS_PAGE`]).
        limit: u32,
    },
    /// The nearest spent budget (Q3) at or above `session`, if any (answered with
    /// [`QueryResult::BudgetSpent`]): what a birth under it would be refused with.
    SpentBudgetOver {
        /// The would-be parent.
        session: SessionId,
    },
    /// Direct children with descendant counts.
    Children {
        /// The parent.
        session: SessionId,
    },
    /// Every node record.
    Nodes,
    /// The Raft status as seen by the answering member.
    Status,
    /// The digest of the answering member's applied state.
    Digest,
    /// How many sessions are in each state (`starting`, `running`, `waiting`, `settled`,
    /// `disposed`).
    SessionCounts,
    /// Q5: the disposed sessions due to be purged, oldest disposal first (answered with
    /// [`QueryResult::SessionIds`]).
    PurgeCandidates {
        /// The caller's clock.
        now_ms: u64,
        /// The retention of disposed sessions.
        disposed_after_ms: u64,
        /// At most this many (clamped to 1..=`lineage_core::retention::PURGE_BATCH`).
        limit: u32,
    },
    /// Q4: one page of the sessions `filter` keeps, oldest first (answered with
    /// [`QueryResult::Listed`]; see [`crate::listing`]).
    ListSessions {
        /// What to keep.
        #[serde(default)]
        filter: crate::listing::ListFilter,
        /// The previous page's `next`; `None` for the first page.
        #[serde(default)]
        after: Option<crate::listing::ListCursor>,
        /// At most this many records (clamped to 1..=[`crate::listing::LIST_PAGE_MAX`]; a page
        /// also stops before [`SUBTREE_PAGE_BYTES`] of records).
        limit: u32,
    },
}

/// A read request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRequest {
    /// Freshness.
    pub consistency: Consistency,
    /// What to read.
    pub query: Query,
}

/// The Raft status of the group as seen by one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryStatus {
    /// The member that answered.
    pub responder: u64,
    /// The current leader, if known.
    pub leader: Option<u64>,
    /// Voters of the effective membership.
    pub voters: Vec<u64>,
    /// Learners of the effective membership.
    pub learners: Vec<u64>,
    /// The current term.
    pub term: u64,
    /// Index of the last applied entry.
    pub last_applied: Option<u64>,
    /// Index of the last committed entry known to the responder (leader: quorum-acknowledged).
    pub commit_index: Option<u64>,
    /// Index of the last log entry.
    pub last_log_index: Option<u64>,
}

/// A query result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", content = "value", rename_all = "snake_case")]
pub enum QueryResult {
    /// For [`Query::Session`].
    Session(Option<Box<SessionRecord>>),
    /// For [`Query::Subtree`], [`Query::SessionsOnNode`], [`Query::OverdueBirths`] and
    /// [`Query::OverdueDeadlines`].
    Sessions(Vec<SessionRecord>),
    /// For [`Query::SubtreePage`].
    Page {
        /// The records of this page, in order.
        sessions: Vec<SessionRecord>,
        /// The cursor of the next page (this page's last id); `None` on the last page.
        next: Option<SessionId>,
    },
    /// For [`Query::IsAncestor`].
    Bool(bool),
    /// For [`Query::Children`].
    Children(Vec<ChildSummary>),
    /// For [`Query::Nodes`].
    Nodes(Vec<NodeRecord>),
    /// For [`Query::Status`].
    Status(RegistryStatus),
    /// For [`Query::Digest`].
    Digest(u64),
    /// For [`Query::SpentBudgetOver`].
    BudgetSpent(Option<lineage_core::budget::BudgetSpent>),
    /// For [`Query::SessionCounts`]: state name -> count.
    Counts(std::collections::BTreeMap<String, u64>),
    /// For [`Query::PurgeCandidates`].
    SessionIds(Vec<SessionId>),
    /// For [`Query::ListSessions`].
    Listed {
        /// The records of this page, oldest first.
        sessions: Vec<SessionRecord>,
        /// Where the next page starts; `None` when nothing further can match.
        next: Option<crate::listing::ListCursor>,
    },
}

/// A reply on a read subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum ReadReply {
    /// The result.
    Done {
        /// The value.
        result: QueryResult,
    },
    /// This member is not the leader (linearizable reads only).
    NotLeader {
        /// The leader's Raft id, if known.
        leader: Option<u64>,
    },
    /// Cannot serve now.
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The request could not be decoded.
    Malformed {
        /// Why.
        reason: String,
    },
    /// The answer is larger than one NATS message may carry (the server's `max_payload`):
    /// read it in pages instead (`list_sessions`, `subtree_page`).
    TooLarge {
        /// How large, and what to read instead.
        reason: String,
    },
}

/// Decodes a write payload from any process. A payload that is not a valid [`Command`] is
/// refused with the most specific rule: a bad session header becomes
/// [`RegistryRefusal::InvalidHeader`] (L2), anything else [`RegistryRefusal::Malformed`].
pub fn decode_command(payload: &[u8]) -> Result<Command, RegistryRefusal> {
    match serde_json::from_slice::<Command>(payload) {
        Ok(cmd) => Ok(cmd),
        Err(err) => {
            let header = serde_json::from_slice::<serde_json::Value>(payload)
                .ok()
                .and_then(|v| v.get("header").cloned());
            if let Some(header) = header {
                if let Err(e) = serde_json::from_value::<SessionHeader>(header) {
                    return Err(header_refusal(&e.to_string()));
                }
            }
            Err(RegistryRefusal::Malformed {
                reason: one_line(&err.to_string()),
            })
        }
    }
}

fn header_refusal(message: &str) -> RegistryRefusal {
    // Core messages read "invalid session header field <field>: <reason>".
    const PREFIX: &str = "invalid session header field ";
    if let Some(rest) = message.strip_prefix(PREFIX) {
        if let Some((field, reason)) = rest.split_once(": ") {
            return RegistryRefusal::InvalidHeader {
                field: field.to_owned(),
                reason: one_line(reason),
            };
        }
    }
    RegistryRefusal::InvalidHeader {
        field: "header".to_owned(),
        reason: one_line(message),
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}
