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
//!
//! | file | what |
//! |---|---|
//! | `client.rs` | the client, its deadline and attempts: `write`, `query`, leader following, hedged reads |
//! | `client/writes.rs` | one typed method per command (`register_session`, `claim_placement`, ...) |
//! | `client/many.rs` | writes of several commands in one request (`write_many`) |
//! | `client/reads.rs` | one typed method per query (`session`, `subtree`, `sessions_on_node`, ...) |

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::Client;
use bytes::Bytes;
use lineage_core::ids::{NodeId, RunId};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::error::RegistryError;
use crate::hedge::{self, Outcome};
use crate::subjects;
use crate::types::{Command, CommandResponse, RegistryRefusal};
pub use crate::wire::Consistency;
use crate::wire::{Query, QueryResult, ReadReply, ReadRequest, WriteReply};

mod many;
mod reads;
mod writes;

const NO_LEADER: u64 = u64::MAX;

/// Records per page when [`RegistryClient::subtree`] reads a subtree: with records of ~0.5 KB
/// a page is ~250 KB, well under NATS' max_payload (the server also caps a page's bytes).
pub const SUBTREE_PAGE: u32 = 500;

/// What a new session needs besides its header (see [`RegistryClient::register_session`]).
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// A child's descriptor (P1).
    pub descriptor: Option<lineage_core::descriptor::SubagentDescriptor>,
    /// The limits the caller enforces (D4, Q1, Q3).
    pub limits: lineage_core::limits::BirthLimits,
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
                WriteReply::DoneMany { .. } => Attempt::Done(Err(RegistryError::Unexpected(
                    "several responses to one command".into(),
                ))),
                WriteReply::NotLeader { leader } => Attempt::Redirect(leader),
                WriteReply::Unavailable { reason } => Attempt::Retry(reason),
            })
            .await?;
        match out {
            CallOk::Write(r) => Ok(r),
            CallOk::WriteMany(_) | CallOk::Read(_) => Err(RegistryError::Unexpected(
                "a reply of another kind to a write".into(),
            )),
        }
    }

    /// One request of several commands (a JSON array), no fallback.
    pub(crate) async fn send_array(
        &self,
        cmds: &[Command],
    ) -> Result<Vec<CommandResponse>, RegistryError> {
        let payload = serde_json::to_vec(cmds).map_err(|e| RegistryError::Codec(e.to_string()))?;
        let max_payload = self.nats.server_info().max_payload;
        if max_payload > 0 && payload.len() > max_payload {
            return Err(RegistryError::Refused(RegistryRefusal::Malformed {
                reason: format!(
                    "{}s is {} bytes ({} commands), more than the server's max_payload of {max_payload}: send them in smaller writes",
                    crate::wire::WRITE_MANY_ARRAY,
                    payload.len(),
                    cmds.len()
                ),
            }));
        }
        let out = self
            .call::<WriteReply>(Bytes::from(payload), true, false, |reply| match reply {
                WriteReply::DoneMany { responses } => {
                    Attempt::Done(Ok(CallOk::WriteMany(responses)))
                }
                // A refusal of the request as a whole (malformed, too many commands).
                WriteReply::Done {
                    response: CommandResponse::Refused(r),
                } => Attempt::Done(Err(RegistryError::Refused(r))),
                WriteReply::Done { response } => Attempt::Done(Err(RegistryError::Unexpected(
                    format!("one response to {} commands: {response:?}", cmds.len()),
                ))),
                WriteReply::NotLeader { leader } => Attempt::Redirect(leader),
                WriteReply::Unavailable { reason } => Attempt::Retry(reason),
            })
            .await?;
        match out {
            CallOk::WriteMany(r) if r.len() == cmds.len() => Ok(r),
            CallOk::WriteMany(r) => Err(RegistryError::Unexpected(format!(
                "{} responses to {} commands",
                r.len(),
                cmds.len()
            ))),
            CallOk::Write(_) | CallOk::Read(_) => Err(RegistryError::Unexpected(
                "a reply of another kind to a write of several commands".into(),
            )),
        }
    }

    async fn accepted(&self, cmd: Command) -> Result<CommandResponse, RegistryError> {
        match self.write(&cmd).await? {
            CommandResponse::Refused(r) => Err(RegistryError::Refused(r)),
            other => Ok(other),
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
            CallOk::Write(_) | CallOk::WriteMany(_) => {
                Err(RegistryError::Unexpected("write reply to a read".into()))
            }
        }
    }
}

enum CallOk {
    Write(CommandResponse),
    WriteMany(Vec<CommandResponse>),
    Read(QueryResult),
}

fn unexpected(r: &CommandResponse) -> RegistryError {
    RegistryError::Unexpected(format!("{r:?}"))
}

fn unexpected_read(r: &QueryResult) -> RegistryError {
    RegistryError::Unexpected(format!("{r:?}"))
}
