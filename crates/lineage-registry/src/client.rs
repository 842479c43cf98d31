//! [`RegistryClient`]: the registry from any process with a NATS connection.
//!
//! Writes go to `lineage.<cluster>.registry.write` (served by every member in one queue group)
//! until the leader is known, then straight to `lineage.<cluster>.registry.<leader>.write`.
//! A member that is not the leader answers `NotLeader` with its guess; the client follows it.
//! No responders, timeouts and leader changes are retried with backoff until an overall
//! deadline, always with the same request id, so a retried write is applied at most once.
//!
//! Reads are linearizable by default (the leader confirms leadership with a quorum before
//! answering); [`Consistency::Stale`] reads are answered by any member from its applied state.
//! A read sent to the members' queue group with no answer after 300 ms is sent again within
//! the same attempt (hedged), so a stopped member still holding its queue subscription does not
//! swallow it (G3).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::Client;
use bytes::Bytes;
use lineage_core::depth::MaxDepth;
use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::error::RegistryError;
use crate::hedge::{self, Outcome};
use crate::subjects;
use crate::types::{
    ChildSummary, Command, CommandResponse, NodeRecord, Placement, SessionRecord, SessionState,
};
pub use crate::wire::Consistency;
use crate::wire::{Query, QueryResult, ReadReply, ReadRequest, RegistryStatus, WriteReply};

const NO_LEADER: u64 = u64::MAX;

/// Records per page when [`RegistryClient::subtree`] reads a subtree: with records of ~0.5 KB
/// a page is ~250 KB, well under NATS' max_payload (the server also caps a page's bytes).
pub const SUBTREE_PAGE: u32 = 500;

/// What a new session needs besides its header (see [`RegistryClient::register_session`]).
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// The descriptor, if known at birth.
    pub descriptor: Option<serde_json::Value>,
    /// The max depth the caller enforces.
    pub max_depth: Option<MaxDepth>,
    /// The fan-out caps the caller enforces (Q1).
    pub fan_out: lineage_core::fanout::FanOut,
    /// The hosting node (placement epoch 1).
    pub node: Option<NodeId>,
    /// The first run.
    pub run: Option<RunId>,
    /// How long its node has to confirm the start; `None`: the default (30 s).
    pub start_within_ms: Option<u64>,
    /// Written by `node` itself, which holds the creation window and launches the session
    /// once this commits: `running` at once (see [`Command::RegisterSession`]).
    pub hosted: bool,
}

/// A cheap, cloneable handle on the registry of one cluster.
#[derive(Clone)]
pub struct RegistryClient {
    nats: Client,
    cluster: Arc<str>,
    leader: Arc<AtomicU64>,
    deadline: Duration,
    attempt_timeout: Duration,
    /// The node this client writes as (`registry.write.<node>`, Z2); `None`: the trusted
    /// subjects (voters, admin tools).
    sender: Option<Arc<str>>,
}

enum Attempt<T> {
    Done(T),
    Redirect(Option<u64>),
    Retry(String),
}

impl RegistryClient {
    /// A client for `cluster` over `nats`; overall deadline 10 s, 2 s per attempt.
    pub fn new(nats: Client, cluster: impl Into<String>) -> Self {
        let cluster: String = cluster.into();
        Self {
            nats,
            cluster: cluster.into(),
            leader: Arc::new(AtomicU64::new(NO_LEADER)),
            deadline: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(2),
            sender: None,
        }
    }

    /// The same client writing as `node` (`lineage.<cluster>.registry.write.<node>`): the
    /// serving member refuses a heartbeat or placement claim for any other node, and NATS
    /// permissions can give a worker exactly its own subject (Z2).
    pub fn as_node(mut self, node: &lineage_core::ids::NodeId) -> Self {
        self.sender = Some(node.as_str().into());
        self
    }

    /// The same client with another overall deadline per call.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The same client with another per-attempt timeout.
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// The cluster this client talks to.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The leader this client currently sends to, if it knows one.
    pub fn leader_hint(&self) -> Option<u64> {
        match self.leader.load(Ordering::Relaxed) {
            NO_LEADER => None,
            id => Some(id),
        }
    }

    fn set_leader(&self, leader: Option<u64>) {
        self.leader
            .store(leader.unwrap_or(NO_LEADER), Ordering::Relaxed);
    }

    async fn call<T: DeserializeOwned>(
        &self,
        payload: Bytes,
        write: bool,
        stale: bool,
        interpret: impl Fn(T) -> Attempt<Result<CallOk, RegistryError>>,
    ) -> Result<CallOk, RegistryError> {
        let started = Instant::now();
        let end = started + self.deadline;
        let mut backoff = Duration::from_millis(10);
        let mut last = String::from("no attempt made");
        let mut timed_out = false;
        let mut redirects = 0u32;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            // Only a read to the members' queue group is hedged: another copy may reach another
            // member. A copy to the leader's own subject would only load the same member again.
            let (subject, hedge) = match (self.leader_hint(), stale) {
                (Some(l), false) if write => match &self.sender {
                    Some(node) => (subjects::write_direct_as(&self.cluster, l, node), false),
                    None => (subjects::write_direct(&self.cluster, l), false),
                },
                (Some(l), false) => (subjects::read_direct(&self.cluster, l), false),
                _ if write => match &self.sender {
                    Some(node) => (subjects::write_as(&self.cluster, node), false),
                    None => (subjects::write(&self.cluster), false),
                },
                _ => (subjects::read(&self.cluster), true),
            };
            let budget = self.attempt_timeout.min(end - now);
            let subject_name = subject.clone();
            // The caller's trace context goes along: the serving member records its part of
            // the request as a span of that trace.
            let headers = lineage_bus::trace::current().map(|ctx| {
                let mut headers = async_nats::HeaderMap::new();
                ctx.inject(&mut headers);
                headers
            });
            // A member that is stopped but still subscribed must not cost a read its whole
            // attempt (G3).
            let outcome =
                hedge::first_reply(&self.nats, subject, headers, payload.clone(), budget, hedge)
                    .await;
            let mut sleep = true;
            match outcome {
                Outcome::TimedOut => {
                    timed_out = true;
                    last = format!("no reply on {subject_name} within {budget:?}");
                    self.set_leader(None);
                    sleep = false;
                }
                Outcome::Failed(e) => {
                    timed_out = matches!(e.kind(), async_nats::RequestErrorKind::TimedOut);
                    last = format!("{subject_name}: {e}");
                    self.set_leader(None);
                }
                Outcome::Reply(msg) => match serde_json::from_slice::<T>(&msg.payload) {
                    Err(e) => {
                        return Err(RegistryError::Unexpected(format!("undecodable reply: {e}")))
                    }
                    Ok(reply) => match interpret(reply) {
                        Attempt::Done(result) => return result,
                        Attempt::Redirect(leader) => {
                            timed_out = false;
                            last = match leader {
                                Some(l) => format!("redirected to leader {l}"),
                                None => "no leader elected yet".to_owned(),
                            };
                            self.set_leader(leader);
                            // Follow a known leader at once (a few times), else back off.
                            if leader.is_some() && redirects < 3 {
                                redirects += 1;
                                sleep = false;
                            }
                        }
                        Attempt::Retry(reason) => {
                            timed_out = false;
                            last = reason;
                        }
                    },
                },
            }
            if sleep {
                let left = end.saturating_duration_since(Instant::now());
                tokio::time::sleep(backoff.min(left)).await;
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
        }
        if timed_out {
            Err(RegistryError::Timeout {
                after_ms: self.deadline.as_millis() as u64,
                last,
            })
        } else {
            Err(RegistryError::Unavailable {
                cluster: self.cluster.to_string(),
                reason: last,
            })
        }
    }

    /// Sends a command and returns the state machine's response, refusals included (as
    /// [`CommandResponse::Refused`]). Retries (same request id) until the deadline.
    pub async fn write(&self, cmd: &Command) -> Result<CommandResponse, RegistryError> {
        let payload = serde_json::to_vec(cmd).map_err(|e| RegistryError::Codec(e.to_string()))?;
        self.write_raw(payload).await
    }

    /// Sends an already-encoded command (JSON), exactly as a process in another language would.
    /// The members decode and validate it; an invalid payload comes back refused.
    pub async fn write_raw(&self, payload: Vec<u8>) -> Result<CommandResponse, RegistryError> {
        let out = self
            .call::<WriteReply>(Bytes::from(payload), true, false, |reply| match reply {
                WriteReply::Done { response } => Attempt::Done(Ok(CallOk::Write(response))),
                WriteReply::NotLeader { leader } => Attempt::Redirect(leader),
                WriteReply::Unavailable { reason } => Attempt::Retry(reason),
            })
            .await?;
        match out {
            CallOk::Write(r) => Ok(r),
            CallOk::Read(_) => Err(RegistryError::Unexpected("read reply to a write".into())),
        }
    }

    async fn accepted(&self, cmd: Command) -> Result<CommandResponse, RegistryError> {
        match self.write(&cmd).await? {
            CommandResponse::Refused(r) => Err(RegistryError::Refused(r)),
            other => Ok(other),
        }
    }

    /// Registers a session (a top-level one, or a child: the commit is the birth). Returns its
    /// depth.
    pub async fn register_session(
        &self,
        request_id: RequestId,
        at_ms: u64,
        header: SessionHeader,
        new: NewSession,
    ) -> Result<u64, RegistryError> {
        let cmd = Command::RegisterSession {
            request_id,
            at_ms,
            header,
            descriptor: new.descriptor,
            max_depth: new.max_depth,
            fan_out: new.fan_out,
            budget: None,
            node: new.node,
            run: new.run,
            start_within_ms: new.start_within_ms,
            hosted: new.hosted,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Registered { depth, .. } => Ok(depth),
            other => Err(unexpected(&other)),
        }
    }

    /// Confirms, as `node`, the start of a `starting` session (`starting -> running`). Returns
    /// its placement.
    pub async fn confirm_start(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        node: NodeId,
        expected_epoch: u64,
    ) -> Result<Placement, RegistryError> {
        let cmd = Command::ConfirmStart {
            request_id,
            at_ms,
            session,
            node,
            expected_epoch,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Started { placement, .. } => Ok(placement),
            other => Err(unexpected(&other)),
        }
    }

    /// The `starting` sessions whose start is overdue at `now_ms`, oldest deadline first, at
    /// most `limit` (clamped to 1..=[`crate::state::OVERDUE_BIRTHS_PAGE`]).
    pub async fn overdue_births(
        &self,
        now_ms: u64,
        limit: u32,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        match self
            .query(Query::OverdueBirths { now_ms, limit }, consistency)
            .await?
        {
            QueryResult::Sessions(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The undisposed sessions whose deadline (Q2) is at or before `now_ms`, earliest first,
    /// at most `limit` (clamped to 1..=[`crate::state::OVERDUE_DEADLINES_PAGE`]).
    pub async fn overdue_deadlines(
        &self,
        now_ms: u64,
        limit: u32,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        match self
            .query(Query::OverdueDeadlines { now_ms, limit }, consistency)
            .await?
        {
            QueryResult::Sessions(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The undisposed sessions whose budget (Q3) is spent, at most `limit` (clamped to
    /// 1..=[`crate::state::SPENT_BUDGETS_PAGE`]).
    pub async fn spent_budgets(
        &self,
        limit: u32,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        match self
            .query(Query::SpentBudgets { limit }, consistency)
            .await?
        {
            QueryResult::Sessions(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// Claims a session's placement by CAS on the epoch (K1). Returns the new placement.
    pub async fn claim_placement(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        node: NodeId,
        expected_epoch: u64,
    ) -> Result<Placement, RegistryError> {
        let cmd = Command::ClaimPlacement {
            request_id,
            at_ms,
            session,
            node,
            expected_epoch,
            run: None,
            activate: false,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Placed { placement } => Ok(placement),
            other => Err(unexpected(&other)),
        }
    }

    /// Records an activation state (not `disposed`: use [`Self::dispose`]).
    pub async fn set_state(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        state: SessionState,
    ) -> Result<(), RegistryError> {
        let cmd = Command::SetState {
            expected_epoch: None,
            request_id,
            at_ms,
            session,
            state,
        };
        match self.accepted(cmd).await? {
            CommandResponse::StateSet { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Closes admission on whole subtrees in one entry (X1). Returns every closed session,
    /// parents before children.
    pub async fn close_admission(
        &self,
        request_id: RequestId,
        at_ms: u64,
        roots: Vec<SessionId>,
    ) -> Result<Vec<SessionId>, RegistryError> {
        let cmd = Command::CloseAdmission {
            request_id,
            at_ms,
            roots,
        };
        match self.accepted(cmd).await? {
            CommandResponse::AdmissionClosed { sessions } => Ok(sessions),
            other => Err(unexpected(&other)),
        }
    }

    /// Disposes a session (refused while it has undisposed children). Returns `true` when it
    /// was already disposed.
    pub async fn dispose(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
    ) -> Result<bool, RegistryError> {
        let cmd = Command::Dispose {
            request_id,
            at_ms,
            session,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Disposed { already, .. } => Ok(already),
            other => Err(unexpected(&other)),
        }
    }

    /// Q5: purges the named disposed sessions that are due (see [`Command::Purge`]); returns
    /// the ones removed.
    pub async fn purge(
        &self,
        request_id: RequestId,
        at_ms: u64,
        sessions: Vec<SessionId>,
        disposed_after_ms: u64,
    ) -> Result<Vec<SessionId>, RegistryError> {
        let cmd = Command::Purge {
            request_id,
            at_ms,
            sessions,
            disposed_after_ms,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Purged { sessions } => Ok(sessions),
            other => Err(unexpected(&other)),
        }
    }

    /// Q5: the disposed sessions due to be purged at `now_ms`, oldest disposal first.
    pub async fn purge_candidates(
        &self,
        now_ms: u64,
        disposed_after_ms: u64,
        limit: u32,
        consistency: Consistency,
    ) -> Result<Vec<SessionId>, RegistryError> {
        match self
            .query(
                Query::PurgeCandidates {
                    now_ms,
                    disposed_after_ms,
                    limit,
                },
                consistency,
            )
            .await?
        {
            QueryResult::SessionIds(ids) => Ok(ids),
            other => Err(unexpected_read(&other)),
        }
    }

    /// Renews a node's lease. Returns the lease end.
    pub async fn heartbeat(
        &self,
        request_id: RequestId,
        at_ms: u64,
        node: NodeId,
        lease_ms: u64,
        info: Option<String>,
    ) -> Result<u64, RegistryError> {
        let cmd = Command::Heartbeat {
            request_id,
            at_ms,
            node,
            lease_ms,
            info,
        };
        match self.accepted(cmd).await? {
            CommandResponse::LeaseRenewed {
                lease_expires_at_ms,
                ..
            } => Ok(lease_expires_at_ms),
            other => Err(unexpected(&other)),
        }
    }

    /// Records a new run of a session. Returns the number of runs.
    pub async fn append_run(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        run: RunId,
    ) -> Result<usize, RegistryError> {
        let cmd = Command::AppendRun {
            request_id,
            at_ms,
            session,
            run,
        };
        match self.accepted(cmd).await? {
            CommandResponse::RunAppended { runs, .. } => Ok(runs),
            other => Err(unexpected(&other)),
        }
    }

    /// Stores a session's descriptor (P1).
    pub async fn set_descriptor(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        descriptor: serde_json::Value,
    ) -> Result<(), RegistryError> {
        let cmd = Command::SetDescriptor {
            request_id,
            at_ms,
            session,
            descriptor,
        };
        match self.accepted(cmd).await? {
            CommandResponse::DescriptorSet { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Runs one query.
    pub async fn query(
        &self,
        query: Query,
        consistency: Consistency,
    ) -> Result<QueryResult, RegistryError> {
        let req = ReadRequest { consistency, query };
        let payload = serde_json::to_vec(&req).map_err(|e| RegistryError::Codec(e.to_string()))?;
        let stale = consistency == Consistency::Stale;
        let out = self
            .call::<ReadReply>(Bytes::from(payload), false, stale, |reply| match reply {
                ReadReply::Done { result } => Attempt::Done(Ok(CallOk::Read(result))),
                ReadReply::NotLeader { leader } => Attempt::Redirect(leader),
                ReadReply::Unavailable { reason } => Attempt::Retry(reason),
                ReadReply::Malformed { reason } | ReadReply::TooLarge { reason } => {
                    Attempt::Done(Err(RegistryError::Codec(reason)))
                }
            })
            .await?;
        match out {
            CallOk::Read(r) => Ok(r),
            CallOk::Write(_) => Err(RegistryError::Unexpected("write reply to a read".into())),
        }
    }

    /// One session's record.
    pub async fn session(
        &self,
        session: SessionId,
        consistency: Consistency,
    ) -> Result<Option<SessionRecord>, RegistryError> {
        match self.query(Query::Session { session }, consistency).await? {
            QueryResult::Session(r) => Ok(r.map(|b| *b)),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The subtree under `root` (inclusive), parents before children (breadth first, ids
    /// sorted within a level), whatever its size: read in pages of [`SUBTREE_PAGE`] records
    /// ([`Query::SubtreePage`]), so no reply comes near NATS' max_payload. Each page is one read
    /// at `consistency`; a session registered while the pages are read may be missing (see
    /// [`crate::state::RegistryState::subtree_page`]).
    pub async fn subtree(
        &self,
        root: SessionId,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let (page, next) = self
                .subtree_page(root.clone(), after, SUBTREE_PAGE, consistency)
                .await?;
            out.extend(page);
            match next {
                Some(cursor) => after = Some(cursor),
                None => return Ok(out),
            }
        }
    }

    /// One page of the subtree under `root`: the records after the cursor `after` (`None`: from
    /// the root), at most `limit`, and the cursor of the next page (`None` on the last page).
    pub async fn subtree_page(
        &self,
        root: SessionId,
        after: Option<SessionId>,
        limit: u32,
        consistency: Consistency,
    ) -> Result<(Vec<SessionRecord>, Option<SessionId>), RegistryError> {
        match self
            .query(Query::SubtreePage { root, after, limit }, consistency)
            .await?
        {
            QueryResult::Page { sessions, next } => Ok((sessions, next)),
            other => Err(unexpected_read(&other)),
        }
    }

    /// Q4: one page of the sessions `filter` keeps, oldest first, after the cursor `after`
    /// (`None`: from the oldest), at most `limit`; and where the next page starts (`None`:
    /// nothing further can match). A page may be short, even empty, with a `next`: each
    /// examines a bounded number of index entries (see [`crate::listing`]).
    pub async fn list_page(
        &self,
        filter: crate::listing::ListFilter,
        after: Option<crate::listing::ListCursor>,
        limit: u32,
        consistency: Consistency,
    ) -> Result<(Vec<SessionRecord>, Option<crate::listing::ListCursor>), RegistryError> {
        match self
            .query(
                Query::ListSessions {
                    filter,
                    after,
                    limit,
                },
                consistency,
            )
            .await?
        {
            QueryResult::Listed { sessions, next } => Ok((sessions, next)),
            other => Err(unexpected_read(&other)),
        }
    }

    /// True when `ancestor` is a strict ancestor of `descendant` (R3, across nodes).
    pub async fn is_ancestor(
        &self,
        ancestor: SessionId,
        descendant: SessionId,
        consistency: Consistency,
    ) -> Result<bool, RegistryError> {
        match self
            .query(
                Query::IsAncestor {
                    ancestor,
                    descendant,
                },
                consistency,
            )
            .await?
        {
            QueryResult::Bool(b) => Ok(b),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The undisposed sessions placed on `node`, oldest first: Q4 listing pages of the node's
    /// index walked to the end (each reply bounded under max_payload, each page a bounded
    /// walk), so a node that hosts thousands of sessions is read whole. Each page is its own
    /// read at `consistency`: a session placed or moved during the walk may be missed or seen
    /// with its new values (re-adoption reads a dead node's sessions, which do not move but
    /// by a takeover, and a takeover claims them with fencing).
    pub async fn sessions_on_node(
        &self,
        node: NodeId,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        let filter = crate::listing::ListFilter {
            node: Some(node),
            ..Default::default()
        };
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let (page, next) = self
                .list_page(
                    filter.clone(),
                    after,
                    crate::listing::LIST_PAGE_MAX,
                    consistency,
                )
                .await?;
            out.extend(
                page.into_iter()
                    .filter(|r| r.state != crate::types::SessionState::Disposed),
            );
            match next {
                Some(cursor) => after = Some(cursor),
                None => return Ok(out),
            }
        }
    }

    /// Direct children with counts of their subagent descendants (I1).
    pub async fn children(
        &self,
        session: SessionId,
        consistency: Consistency,
    ) -> Result<Vec<ChildSummary>, RegistryError> {
        match self.query(Query::Children { session }, consistency).await? {
            QueryResult::Children(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// Every node record with its lease.
    pub async fn nodes(&self, consistency: Consistency) -> Result<Vec<NodeRecord>, RegistryError> {
        match self.query(Query::Nodes, consistency).await? {
            QueryResult::Nodes(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The Raft status (linearizable: as seen by the leader).
    pub async fn status(&self, consistency: Consistency) -> Result<RegistryStatus, RegistryError> {
        match self.query(Query::Status, consistency).await? {
            QueryResult::Status(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// How many sessions are in each state.
    pub async fn session_counts(
        &self,
        consistency: Consistency,
    ) -> Result<std::collections::BTreeMap<String, u64>, RegistryError> {
        match self.query(Query::SessionCounts, consistency).await? {
            QueryResult::Counts(c) => Ok(c),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The nearest spent budget (Q3) at or above `session`, if any.
    pub async fn spent_budget_over(
        &self,
        session: SessionId,
        consistency: Consistency,
    ) -> Result<Option<lineage_core::budget::BudgetSpent>, RegistryError> {
        match self
            .query(Query::SpentBudgetOver { session }, consistency)
            .await?
        {
            QueryResult::BudgetSpent(b) => Ok(b),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The digest of the answering member's applied state.
    pub async fn digest(&self, consistency: Consistency) -> Result<u64, RegistryError> {
        match self.query(Query::Digest, consistency).await? {
            QueryResult::Digest(d) => Ok(d),
            other => Err(unexpected_read(&other)),
        }
    }
}

enum CallOk {
    Write(CommandResponse),
    Read(QueryResult),
}

fn unexpected(r: &CommandResponse) -> RegistryError {
    RegistryError::Unexpected(format!("{r:?}"))
}

fn unexpected_read(r: &QueryResult) -> RegistryError {
    RegistryError::Unexpected(format!("{r:?}"))
}
