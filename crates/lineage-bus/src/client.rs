//! [`ControlClient`]: the `lineage` control service as typed calls (N3, O3), one method per op.
//!
//! Every client of the service uses it: the `lineage` CLI verbs, `lineage bench`, the demo and
//! the tests. A call sends the request body of `lineage_protocol::control` to
//! `lineage.<cluster>.ctl.<op>` (any node serves it) or, after [`ControlClient::on`], to
//! `lineage.<cluster>.node.<node>.<op>` (that node must), with the caller's trace context as
//! its `traceparent` header, and decodes the reply envelope: a typed reply, or the service's
//! [`ControlError`] (`{code, message}`; the codes are `bad_request`, `not_found`, `refused`,
//! `unavailable`, `internal`). No reply within the deadline, or nobody serving the subject, is
//! `unavailable`; a reply that is not an envelope is `internal`.
//!
//! A node that is stopped or hung (SIGSTOP, a frozen VM) keeps its queue subscriptions until
//! nats-server drops it after its missed pings, and requests routed to it meanwhile get no
//! reply. So a call to the cluster-wide subject asks for heartbeats ([`crate::control::Watch`]):
//! when the node serving it goes silent, a call that is safe to repeat is sent again (any
//! node of the queue group may take it) until the deadline: reads (`status`, `agents`),
//! `drain` and `resume` (idempotent), and `spawn` / `followup` carrying a request id (the
//! registry and the session log recognise the retry by it). `interrupt`, a spawn or followup
//! without a request id, and per-node calls ([`ControlClient::on`]) are sent once.
//!
//! An `unavailable` answer may carry a retry hint ([`ControlError::retry_after_ms`]: a node
//! that cannot renew its lease takes no message for a session it hosts, and changes nothing).
//! A call that is safe to repeat (the same ones as above, per-node ones included) waits that
//! long and is sent again, while the deadline leaves room; otherwise the answer is returned.

use std::time::Duration;

use futures::StreamExt;
use lineage_core::ids::{DrainId, NodeId, SessionId};
use lineage_protocol::control::{
    ops, AgentsReply, AgentsRequest, DrainProgress, DrainReport, DrainRequest, FollowupReply,
    FollowupRequest, InterruptReply, InterruptRequest, ResumeReply, ResumeRequest, SpawnReply,
    SpawnRequest, StatusReply, StatusRequest,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::control::{ControlError, Hop, Unanswered, Watch};
use crate::Subjects;

/// A typed client of the `lineage` control service of one cluster.
#[derive(Debug, Clone)]
pub struct ControlClient {
    nats: async_nats::Client,
    subjects: Subjects,
    timeout: Duration,
    node: Option<NodeId>,
    watch: Watch,
}

/// The shortest wait a retry hint gets ([`ControlError::retry_after_ms`]): a hint of 0 (or
/// a few ms) does not turn into a busy loop.
const MIN_RETRY_AFTER: Duration = Duration::from_millis(50);

/// Whether a call may be sent again when the node serving it goes silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repeat {
    /// Safe to repeat: a read, an idempotent op, or one carrying its request id.
    Safe,
    /// Sent once: repeating it could apply it twice.
    Once,
}

impl Repeat {
    /// [`Repeat::Safe`] when the request carries a request id.
    fn with_id<T>(id: Option<&T>) -> Self {
        match id {
            Some(_) => Repeat::Safe,
            None => Repeat::Once,
        }
    }
}

impl ControlClient {
    /// A client of the cluster `subjects` names, over `nats`; each call waits up to `timeout`
    /// for its reply.
    pub fn new(nats: async_nats::Client, subjects: Subjects, timeout: Duration) -> Self {
        ControlClient {
            nats,
            subjects,
            timeout,
            node: None,
            watch: Watch::default(),
        }
    }

    /// The same client with other heartbeat settings for the calls it may repeat.
    pub fn with_watch(&self, watch: Watch) -> Self {
        ControlClient {
            watch,
            ..self.clone()
        }
    }

    /// The same client with another deadline per call.
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        ControlClient {
            timeout,
            ..self.clone()
        }
    }

    /// The same client addressing one node's per-node subjects
    /// (`lineage.<cluster>.node.<node>.<op>`): that node must serve every call.
    pub fn on(&self, node: &NodeId) -> Self {
        ControlClient {
            node: Some(node.clone()),
            ..self.clone()
        }
    }

    /// The NATS connection.
    pub fn nats(&self) -> &async_nats::Client {
        &self.nats
    }

    /// The cluster's subjects.
    pub fn subjects(&self) -> &Subjects {
        &self.subjects
    }

    /// The deadline of one call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The subject a call of `op` goes to.
    pub fn subject(&self, op: &str) -> String {
        match &self.node {
            Some(node) => self.subjects.node_control(node, op),
            None => self.subjects.control(op),
        }
    }

    /// Sends `body` as `op` once and decodes the reply.
    pub async fn call<Req: Serialize, Res: DeserializeOwned>(
        &self,
        op: &str,
        body: &Req,
    ) -> Result<Res, ControlError> {
        self.call_as(op, body, Repeat::Once).await
    }

    /// Sends `body` as `op` and decodes the reply: the one request path of every method. A
    /// [`Repeat::Safe`] call is sent again, until the deadline, while the node serving it on the
    /// cluster-wide subject goes silent, and after the wait an `unavailable` answer with a retry
    /// hint asks for (see the module docs).
    async fn call_as<Req: Serialize, Res: DeserializeOwned>(
        &self,
        op: &str,
        body: &Req,
        repeat: Repeat,
    ) -> Result<Res, ControlError> {
        let subject = self.subject(op);
        let payload = crate::control::encode_request(body)?;
        let end = tokio::time::Instant::now() + self.timeout;
        // Bounded: each hinted wait lasts at least MIN_RETRY_AFTER, and the deadline ends them.
        let most = 1 + self.timeout.as_millis() / MIN_RETRY_AFTER.as_millis();
        for hinted in 1..=most {
            // The first send has the whole deadline (its "no reply within" names it).
            let left = match hinted {
                1 => self.timeout,
                _ => end.saturating_duration_since(tokio::time::Instant::now()),
            };
            let outcome = self.send(&subject, payload.clone(), left, repeat).await;
            let after = match (&outcome, repeat) {
                (Err(e), Repeat::Safe) => e.retry_after().map(|a| a.max(MIN_RETRY_AFTER)),
                _ => None,
            };
            match after {
                Some(after) if tokio::time::Instant::now() + after < end => {
                    tracing::debug!(%subject, hinted, after_ms = after.as_millis() as u64, "asked to retry later; sending again then");
                    tokio::time::sleep(after).await;
                }
                _ => return outcome,
            }
        }
        Err(crate::control::no_reply(&subject, self.timeout))
    }

    /// One send of an encoded call with `left` to go: once, or (a [`Repeat::Safe`] call to the
    /// cluster-wide subject) again while the node serving it goes silent.
    async fn send<Res: DeserializeOwned>(
        &self,
        subject: &str,
        payload: Vec<u8>,
        left: Duration,
        repeat: Repeat,
    ) -> Result<Res, ControlError> {
        let trace = crate::trace::current();
        if repeat == Repeat::Once || self.node.is_some() {
            let reply = crate::control::request_bytes(
                &self.nats,
                subject.to_owned(),
                payload,
                left,
                trace,
                Hop::Client,
            )
            .await?;
            return crate::control::decode_reply(subject, &reply);
        }
        let end = tokio::time::Instant::now() + left;
        // Bounded: every attempt but the last lasts at least `watch.first` (or `silence`).
        let shortest = self.watch.first.min(self.watch.silence);
        let attempts = 1 + left.as_millis() / shortest.as_millis().max(1);
        let mut last = None;
        for attempt in 1..=attempts {
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            match crate::control::request_watched(
                &self.nats,
                subject.to_owned(),
                payload.clone(),
                left,
                self.watch,
                trace,
                Hop::Client,
            )
            .await
            {
                Ok(reply) => return crate::control::decode_reply(subject, &reply),
                Err(Unanswered::Silent(e)) => {
                    tracing::debug!(%subject, attempt, error = %e.message, "a node went silent; asking again");
                    last = Some(e);
                }
                // The deadline passed in an attempt after a silent one: the silence says more.
                Err(Unanswered::Failed(e)) => match last {
                    Some(silent) if tokio::time::Instant::now() >= end => return Err(silent),
                    _ => return Err(e),
                },
            }
        }
        Err(last.unwrap_or_else(|| crate::control::no_reply(subject, self.timeout)))
    }

    /// `spawn`: a top-level session, or a child of a live parent.
    pub async fn spawn(&self, request: &SpawnRequest) -> Result<SpawnReply, ControlError> {
        self.call_as(
            ops::SPAWN,
            request,
            Repeat::with_id(request.request_id.as_ref()),
        )
        .await
    }

    /// `followup` (M3): the next user message to a session.
    pub async fn followup(&self, request: &FollowupRequest) -> Result<FollowupReply, ControlError> {
        self.call_as(
            ops::FOLLOWUP,
            request,
            Repeat::with_id(request.request_id.as_ref()),
        )
        .await
    }

    /// `interrupt` (M4): cancel a live session's turn, with authority.
    pub async fn interrupt(
        &self,
        request: &InterruptRequest,
    ) -> Result<InterruptReply, ControlError> {
        self.call(ops::INTERRUPT, request).await
    }

    /// `drain` (X1) of the subtrees under `roots`, without progress messages.
    pub async fn drain(&self, roots: Vec<SessionId>) -> Result<DrainReport, ControlError> {
        self.call_as(
            ops::DRAIN,
            &DrainRequest {
                roots,
                progress: None,
            },
            Repeat::Safe,
        )
        .await
    }

    /// `drain` (X1) with live progress: subscribes to
    /// `lineage.<cluster>.drain.<progress>.progress` before sending, hands every message to
    /// `on_progress` (in order; `Err` for one that is not a [`DrainProgress`]) until the reply
    /// arrives, then the ones already queued, and unsubscribes. When the subscription cannot be
    /// made, the drain runs without progress.
    pub async fn drain_with_progress(
        &self,
        roots: Vec<SessionId>,
        progress: DrainId,
        mut on_progress: impl FnMut(Result<DrainProgress, serde_json::Error>),
    ) -> Result<DrainReport, ControlError> {
        use futures::FutureExt;
        let mut sub = self
            .nats
            .subscribe(self.subjects.drain_progress(&progress))
            .await
            .ok();
        let request = DrainRequest {
            roots,
            progress: sub.as_ref().map(|_| progress),
        };
        let reply = self.call_as::<_, DrainReport>(ops::DRAIN, &request, Repeat::Safe);
        tokio::pin!(reply);
        let outcome = loop {
            tokio::select! {
                biased;
                msg = async { sub.as_mut()?.next().await }, if sub.is_some() => match msg {
                    Some(msg) => on_progress(serde_json::from_slice(&msg.payload)),
                    None => sub = None,
                },
                outcome = &mut reply => break outcome,
            }
        };
        // Messages published before the reply may still be queued: hand them over, then stop.
        if let Some(mut sub) = sub {
            while let Some(Some(msg)) = sub.next().now_or_never() {
                on_progress(serde_json::from_slice(&msg.payload));
            }
            let _ = sub.unsubscribe().await;
        }
        outcome
    }

    /// `resume` (K1): host a cold session on the serving node.
    pub async fn resume(&self, session: SessionId) -> Result<ResumeReply, ControlError> {
        self.call_as(ops::RESUME, &ResumeRequest { session }, Repeat::Safe)
            .await
    }

    /// `status`: what the serving node hosts.
    pub async fn status(&self) -> Result<StatusReply, ControlError> {
        self.call_as(ops::STATUS, &StatusRequest {}, Repeat::Safe)
            .await
    }

    /// `agents` (T4): the profiles the serving node offers.
    pub async fn agents(&self) -> Result<AgentsReply, ControlError> {
        self.call_as(ops::AGENTS, &AgentsRequest {}, Repeat::Safe)
            .await
    }
}
