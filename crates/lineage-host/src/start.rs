//! Birth, the hosting node's half (S1, P1, C1, C3, E1): the per-node `start`.
//!
//! The spawning node registered the session (`starting`, see [`crate::spawn`]); the node that
//! hosts it writes the creation window to the log (composition, delegated policy, descriptor,
//! the accepted first prompt, as one message), confirms the start in the registry
//! (`starting -> running`, fenced by its placement epoch), then launches the agent, which
//! announces `subagent/start` before it can take a turn.

use std::sync::Arc;

use lineage_core::composition::child_preset;
use lineage_core::descriptor::{seed_descriptor_turn, SubagentShape};
use lineage_core::log::SessionLog;
use lineage_core::messages::{StopReason, SubagentRunInfo};
use lineage_core::policy::append_delegated_policy_overrides;
use lineage_registry::types::Command;
use tokio::sync::oneshot;

use crate::agent::{launch, Accepted, AgentInit, AgentRecord, ACCEPTED_EVENT, AGENT_EVENT};
use crate::control::{OneShotResult, SpawnReply, StartRequest};
use crate::error::HostError;
use crate::host::{provider_of, Host, Shared};
use crate::telemetry::op_span;
use lineage_drivers::driver::TurnMessage;

use crate::spawn::child_policy_view;

impl Shared {
    /// Step 7, on the hosting node: the creation window, `subagent/start`, the first turn.
    /// Boxed (and `Send`): an agent's turn may spawn, which starts another agent task.
    pub(crate) fn start_local(
        self: &Arc<Self>,
        request: StartRequest,
    ) -> lineage_drivers::driver::BoxFuture<'static, Result<SpawnReply, HostError>> {
        let this = self.clone();
        Box::pin(async move { this.start_local_inner(request).await })
    }

    async fn start_local_inner(
        self: &Arc<Self>,
        request: StartRequest,
    ) -> Result<SpawnReply, HostError> {
        self.check_running()?;
        let header = request.header;
        header.validate()?;
        let session = header.id().clone();
        let depth = header.delegation_depth().unwrap_or(0);
        if self.is_live(&session) {
            return Ok(SpawnReply {
                session,
                run: request.run,
                node: self.cfg.node.clone(),
                depth,
                result: None,
            });
        }
        let now = self.now();
        let (log, shape, preset, policy_view, descriptor) = match header.parent_session() {
            Some(_) => {
                let descriptor = request.descriptor.ok_or_else(|| {
                    HostError::BadRequest(format!(
                        "start of child {session} carries no descriptor; every child has one (P1)"
                    ))
                })?;
                let shape = descriptor.mode;
                let mut log = match shape {
                    // Continuable: the descriptor right after the (empty) seed (P1).
                    SubagentShape::Continuable => {
                        seed_descriptor_turn(session.clone(), vec![], &descriptor, now)?
                    }
                    // One-shot: the descriptor comes at the first pre-step.
                    SubagentShape::OneShot => SessionLog::create(session.clone(), vec![]),
                };
                // C3: the snapshot into the child's log, `source: "delegation"`.
                append_delegated_policy_overrides(&mut log, &request.policy, now);
                // C1: the composition the child runs with; its children join it.
                let preset = Some(child_preset(
                    header.agent_preset(),
                    &descriptor.composition(),
                ));
                let view = child_policy_view(&request.policy);
                (log, Some(shape), preset, view, Some(descriptor))
            }
            None => (
                SessionLog::create(session.clone(), vec![]),
                None,
                header.agent_preset().cloned(),
                request.policy_view.unwrap_or_default(),
                None,
            ),
        };
        let mut log = log;
        let record = AgentRecord {
            agent: request.agent.clone(),
            policy_view,
        };
        let record = serde_json::to_value(&record)
            .map_err(|e| HostError::Internal(format!("cannot encode the agent record: {e}")))?;
        log.append(AGENT_EVENT, record, now);
        // The first prompt is accepted with the creation window (one message): the agent
        // takes its first turn on it as soon as it is live.
        let accepted = Accepted {
            message: TurnMessage::User {
                content: request.prompt,
            },
            wake: true,
            dedup_id: None,
            request_id: None,
        };
        let accepted = serde_json::to_value(&accepted)
            .map_err(|e| HostError::Internal(format!("cannot encode the first prompt: {e}")))?;
        log.append(ACCEPTED_EVENT, accepted, now);
        // Durable before anything else sees the child: the whole creation window in one
        // message (all of it or none), on an empty log.
        let cursor = self
            .events
            .append_all(
                &session,
                log.events(),
                Some(lineage_bus::events::LogCursor::default()),
            )
            .await?;
        // S1, K1: only now is it hosted: `starting -> running`, fenced by this node and the
        // placement epoch it was registered with. Refused (the sweeper or a drain disposed the
        // birth, or another node hosts it): nothing is launched.
        self.write(|request_id, at_ms| Command::ConfirmStart {
            request_id,
            at_ms,
            session: session.clone(),
            node: self.cfg.node.clone(),
            expected_epoch: 1,
        })
        .await?;
        let parent = header.parent_session().cloned();
        let owner = lineage_core::routing::owner_of(
            parent.as_ref(),
            parent.as_ref().is_some_and(|p| self.is_live(p)),
        );
        let run_info = match (&parent, &request.run, shape) {
            (Some(parent), Some(run), Some(shape)) => Some(SubagentRunInfo {
                run_id: run.clone(),
                provider: provider_of(&request.agent).to_owned(),
                child_id: session.clone(),
                parent_session_id: parent.clone(),
                local: request.parent_node.as_ref() == Some(&self.cfg.node),
                shape,
                node: self.cfg.node.clone(),
                at_ms: now,
            }),
            _ => None,
        };
        let (result_tx, result_rx) = match shape {
            Some(SubagentShape::OneShot) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            Some(SubagentShape::Continuable) | None => (None, None),
        };
        launch(
            self,
            AgentInit {
                header: header.clone(),
                shape,
                descriptor,
                spec: request.agent,
                policy_view,
                preset,
                log,
                cursor,
                run: run_info,
                owner,
                resumed: false,
                // Registered with its node: placement epoch 1.
                epoch: Some(1),
                one_shot: result_tx,
            },
        )
        .await?;
        let result = match result_rx {
            Some(rx) => Some(rx.await.unwrap_or(OneShotResult {
                output: None,
                structured: None,
                stop_reason: StopReason::Disposed,
            })),
            None => None,
        };
        Ok(SpawnReply {
            session,
            run: request.run,
            node: self.cfg.node.clone(),
            depth,
            result,
        })
    }
}

impl Host {
    /// Per-node `start`: hosts a session registered by the spawning node, in a `start` span.
    pub async fn start_hosted(&self, request: StartRequest) -> Result<SpawnReply, HostError> {
        let op = op_span!("start", self.node());
        op.record("session", request.header.id())
            .record_opt("parent", request.header.parent_session())
            .record_opt("run", request.run.as_ref())
            .record_opt(
                "shape",
                request.descriptor.as_ref().map(|d| d.mode.as_str()),
            );
        let reply = op.run(self.shared.start_local(request)).await;
        if let Some(result) = reply.as_ref().ok().and_then(|r| r.result.as_ref()) {
            op.record("stop_reason", result.stop_reason.as_str());
        }
        reply
    }
}
