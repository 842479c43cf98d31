//! Where a request goes (R2, T4, N3): node liveness by lease, forward-once routing to the node
//! hosting a session, the per-node control transport, and the check that a target node runs an
//! agent before its birth is registered.

use std::time::Duration;

use lineage_bus::control::ControlError;
use lineage_core::ids::NodeId;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::driver::AgentSpec;
use crate::error::HostError;

use crate::host::Shared;

impl Shared {
    /// True when `node`'s lease is current (this node is always alive to itself).
    pub(crate) async fn node_alive(&self, node: &NodeId) -> Result<bool, HostError> {
        if node == &self.cfg.node {
            return Ok(!self.shutdown.is_cancelled());
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
    pub(crate) async fn forward_target(
        &self,
        record: &lineage_registry::SessionRecord,
        already_forwarded: bool,
    ) -> Result<Option<NodeId>, HostError> {
        let active = matches!(
            record.state,
            lineage_registry::SessionState::Running | lineage_registry::SessionState::Waiting
        );
        match &record.placement {
            Some(p)
                if active
                    && !already_forwarded
                    && p.node != self.cfg.node
                    && self.node_alive(&p.node).await? =>
            {
                Ok(Some(p.node.clone()))
            }
            Some(_) | None => Ok(None),
        }
    }

    /// The NATS client that reaches `node` (none on in-memory ports: `unavailable`).
    pub(crate) fn control_transport(
        &self,
        node: &NodeId,
    ) -> Result<&async_nats::Client, HostError> {
        self.nats.as_ref().ok_or_else(|| {
            HostError::Unavailable(format!(
                "node {node} cannot be reached: node {} has no NATS control transport (it runs on in-memory ports)",
                self.cfg.node
            ))
        })
    }

    /// A control request to another node's per-node subject (with the current trace context as
    /// its `traceparent`).
    pub(crate) async fn node_request<Req: Serialize, Res: DeserializeOwned>(
        &self,
        node: &NodeId,
        op: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Res, HostError> {
        let nats = self.control_transport(node)?;
        let subject = self.cfg.subjects.node_control(node, op);
        lineage_bus::control::request(nats, subject, body, timeout)
            .await
            .map_err(|e: ControlError| match e.code {
                lineage_bus::control::ErrorCode::Unavailable => HostError::Unavailable(e.message),
                _ => HostError::Remote(e),
            })
    }

    /// Refuses (before anything is registered) an agent `target` would not run (T4). Inline
    /// scripts run anywhere; a profile or raw command line is checked against this node's
    /// offer, or the target's (its per-node `agents`).
    pub(crate) async fn admit_agent(
        &self,
        target: &NodeId,
        spec: &AgentSpec,
    ) -> Result<(), HostError> {
        if matches!(spec, AgentSpec::Script { .. }) {
            return Ok(());
        }
        let offer = if target == &self.cfg.node {
            self.drivers.offer()
        } else {
            self.node_request(
                target,
                crate::control::ops::AGENTS,
                &crate::control::AgentsRequest {},
                self.cfg.request_timeout,
            )
            .await
            .map_err(|e| match e {
                HostError::Unavailable(_) => HostError::Unavailable(format!(
                    "node {target} does not answer (is it running? `lineage status` lists the nodes)"
                )),
                other => other,
            })?
        };
        crate::profiles::check_offer(&offer, spec).map_err(|e| match e {
            HostError::BadRequest(m) if target != &self.cfg.node => {
                HostError::BadRequest(format!("on node {target}: {m}"))
            }
            other => other,
        })
    }
}
