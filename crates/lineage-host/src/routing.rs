//! Where a request goes (R2, T4, N3): node liveness by lease, forward-once routing to the node
//! hosting a session, the per-node control transport, and the check that a target node runs an
//! agent before its birth is registered.

use std::time::Duration;

use lineage_bus::control::{decode_reply, encode_request, ControlError, ErrorCode, Hop};
use lineage_bus::ports::{ControlCall, ControlTarget};
use lineage_core::ids::NodeId;
use lineage_core::routing::{route, Route};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::HostError;

use crate::shared::Shared;

impl Shared {
    /// True when `node`'s lease is current (this node is always alive to itself).
    pub(crate) async fn node_alive(&self, node: &NodeId) -> Result<bool, HostError> {
        if node == &self.cfg.node {
            return Ok(!self.lifetime.shutdown.is_cancelled());
        }
        let now = self.now();
        Ok(self
            .registry
            .nodes()
            .await?
            .iter()
            .any(|n| &n.node == node && n.lease_expires_at_ms > now))
    }

    /// The node a request about `record` must be forwarded to: its placement node when the
    /// session is active (running or waiting) there, that node is another one and its lease is
    /// current, and the request was not forwarded already (a request is forwarded at most once).
    /// `None`: serve it here (the session is cold, or hosted here).
    /// The rule is [`lineage_core::routing::route`]; this adds the lease check.
    pub(crate) async fn forward_target(
        &self,
        record: &lineage_registry::SessionRecord,
        already_forwarded: bool,
    ) -> Result<Option<NodeId>, HostError> {
        self.forward_target_by(record, already_forwarded, route)
            .await
    }

    /// [`Shared::forward_target`] for a followup: a settled session goes back to its node
    /// while that node is live ([`lineage_core::routing::route_followup`]).
    pub(crate) async fn followup_target(
        &self,
        record: &lineage_registry::SessionRecord,
        already_forwarded: bool,
    ) -> Result<Option<NodeId>, HostError> {
        self.forward_target_by(
            record,
            already_forwarded,
            lineage_core::routing::route_followup,
        )
        .await
    }

    async fn forward_target_by(
        &self,
        record: &lineage_registry::SessionRecord,
        already_forwarded: bool,
        rule: fn(
            lineage_registry::types::SessionState,
            Option<&NodeId>,
            &NodeId,
            bool,
        ) -> lineage_core::routing::Route,
    ) -> Result<Option<NodeId>, HostError> {
        // A released placement (its node handed the session off) is hosted nowhere: cold.
        let placement = record.placement.as_ref().and_then(|p| p.host());
        match rule(record.state, placement, &self.cfg.node, already_forwarded) {
            // Its node's lease expired: the session is cold, served (resumed) here.
            Route::Forward(node) => Ok(self.node_alive(&node).await?.then_some(node)),
            Route::Here => Ok(None),
        }
    }

    /// A control request to another node's per-node subject (with the current trace context as
    /// its `traceparent`), as a client would send it.
    pub(crate) async fn node_request<Req: Serialize, Res: DeserializeOwned>(
        &self,
        node: &NodeId,
        op: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Res, HostError> {
        self.call_node(node, op, body, timeout, Hop::Client).await
    }

    /// Forwards a request to `node`, the node hosting its session, with `Lineage-Forwarded: 1`
    /// (and the current trace context): that node serves it and never forwards it again.
    pub(crate) async fn forward<Req: Serialize, Res: DeserializeOwned>(
        &self,
        node: &NodeId,
        op: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Res, HostError> {
        self.call_node(node, op, body, timeout, Hop::Forwarded)
            .await
    }

    /// One call to `node` over the control transport; an `unavailable` answer (or none) is
    /// [`HostError::Unavailable`], any other error (or an `unavailable` one with a retry hint)
    /// the remote node's.
    async fn call_node<Req: Serialize, Res: DeserializeOwned>(
        &self,
        node: &NodeId,
        op: &str,
        body: &Req,
        timeout: Duration,
        hop: Hop,
    ) -> Result<Res, HostError> {
        // An answer with a retry hint is passed on as it is, hint included.
        let to_host = |e: ControlError| match e.code {
            ErrorCode::Unavailable if e.retry_after_ms.is_none() => {
                HostError::unavailable_from_remote(e.message)
            }
            _ => HostError::Remote(e),
        };
        let call = ControlCall {
            op: op.to_owned(),
            body: encode_request(body).map_err(to_host)?,
            hop,
            trace: lineage_bus::trace::current(),
        };
        let target = ControlTarget::Node(node.clone());
        let reply = self
            .bus
            .control
            .request(&target, call, timeout)
            .await
            .map_err(to_host)?;
        decode_reply(&self.cfg.subjects.node_control(node, op), &reply).map_err(to_host)
    }
}
