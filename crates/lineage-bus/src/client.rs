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

use crate::control::{ControlError, Hop};
use crate::Subjects;

/// A typed client of the `lineage` control service of one cluster.
#[derive(Debug, Clone)]
pub struct ControlClient {
    nats: async_nats::Client,
    subjects: Subjects,
    timeout: Duration,
    node: Option<NodeId>,
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

    /// Sends `body` as `op` and decodes the reply: the one request path of every method.
    pub async fn call<Req: Serialize, Res: DeserializeOwned>(
        &self,
        op: &str,
        body: &Req,
    ) -> Result<Res, ControlError> {
        crate::control::request_with(
            &self.nats,
            self.subject(op),
            body,
            self.timeout,
            crate::trace::current(),
            Hop::Client,
        )
        .await
    }

    /// `spawn`: a top-level session, or a child of a live parent.
    pub async fn spawn(&self, request: &SpawnRequest) -> Result<SpawnReply, ControlError> {
        self.call(ops::SPAWN, request).await
    }

    /// `followup` (M3): the next user message to a session.
    pub async fn followup(&self, request: &FollowupRequest) -> Result<FollowupReply, ControlError> {
        self.call(ops::FOLLOWUP, request).await
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
        self.call(
            ops::DRAIN,
            &DrainRequest {
                roots,
                progress: None,
            },
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
        let reply = self.call::<_, DrainReport>(ops::DRAIN, &request);
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
        self.call(ops::RESUME, &ResumeRequest { session }).await
    }

    /// `status`: what the serving node hosts.
    pub async fn status(&self) -> Result<StatusReply, ControlError> {
        self.call(ops::STATUS, &StatusRequest {}).await
    }

    /// `agents` (T4): the profiles the serving node offers.
    pub async fn agents(&self) -> Result<AgentsReply, ControlError> {
        self.call(ops::AGENTS, &AgentsRequest {}).await
    }
}
