//! Birth, the hosting node's half (S1, P1, C1, C3, E1): the per-node `start`.
//!
//! The spawning node built the frozen header and captured the policy ([`crate::spawn`]); the
//! node that will host the session, in this order:
//!
//! 1. and 2., at the same time (one round trip, not two):
//!    - writes the creation window to the session's (empty) log: composition, delegated
//!      policy, descriptor, the agent record and the accepted first prompt, as one message;
//!    - registers the birth, `hosted` by this node (`RegisterSession`, under the spawn's
//!      request id): the commit is the birth, and the registry applies every birth rule
//!      (parent live, admission open, depth, lineage). It is `running` at once.
//!
//!    Only when both succeeded does anything see the child. Refused: nothing is launched, and
//!    the log (no record names it) is never read. Registered but the window not written: the
//!    birth is disposed here. A node that stops between the two leaves a `running` record with
//!    an empty log: re-adoption, takeover or a followup that would resume it finds nothing to
//!    resume, disposes it and tells its parent ([`crate::births`]), so no record that looks
//!    alive stays behind;
//! 3. launches the agent, which announces `subagent/start` before it takes its first turn.
//!
//! A launch that fails disposes the birth. A retried spawn (same request id) whose first birth
//! registered is answered with that session, unless it never started (`starting`, written by a
//! registry client that is not a hosting node, or disposed): then it is refused, so a retry
//! completes or refuses and never acknowledges a dead birth.

use std::sync::Arc;

use lineage_core::composition::child_preset;
use lineage_core::descriptor::{seed_descriptor_turn, SubagentShape};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_core::log::SessionLog;
use lineage_core::messages::{StopReason, SubagentRunInfo};
use lineage_core::policy::append_delegated_policy_overrides;
use lineage_registry::types::{Command, CommandResponse, SessionState};
use tokio::sync::oneshot;

use crate::agent::{launch, Accepted, AgentInit, AgentRecord, ACCEPTED_EVENT, AGENT_EVENT};
use crate::control::{OneShotResult, SpawnReply, StartRequest};
use crate::error::HostError;
use crate::host::{provider_of, Host};
use crate::shared::Shared;
use crate::telemetry::op_span;
use lineage_drivers::DriverError;
use lineage_protocol::birth::{Birth, BirthKind};

use crate::spawn::child_policy_view;

impl Shared {
    /// Step 7, on the hosting node: the creation window, `subagent/start`, the first turn.
    /// Boxed (and `Send`): an agent's turn may spawn, which starts another agent task.
    pub(crate) fn start_local(
        self: &Arc<Self>,
        request: StartRequest,
    ) -> lineage_drivers::driver::BoxFuture<'static, Result<SpawnReply, HostError>> {
        let this = self.clone();
        Box::pin(async move { this.host_birth(request).await })
    }

    /// Steps 1 to 3 for `request` (see the module docs).
    async fn host_birth(self: &Arc<Self>, request: StartRequest) -> Result<SpawnReply, HostError> {
        self.lifetime.check_running()?;
        request.check_kind().map_err(HostError::BadRequest)?;
        request.check_workspace().map_err(HostError::BadRequest)?;
        // T4: this node runs only what its operator configured; refused before anything is
        // written, so an unknown profile changes nothing.
        lineage_drivers::profiles::check_offer(&self.drivers.offer(), &request.agent).map_err(
            |e| match e {
                DriverError::BadRequest(m) => {
                    HostError::BadRequest(format!("on node {}: {m}", self.cfg.node))
                }
                other => HostError::from(other),
            },
        )?;
        // Issue 39: files need a directory of their own, and a client's upload a profile that
        // takes one; refused before anything is written.
        if let Some(snapshot) = &request.workspace {
            self.check_files(&request, snapshot)?;
        }
        // No `header.validate()` here: a `SessionHeader` holds only a valid header (its
        // deserializer and constructors check it), and the registry's apply checks the birth
        // again, with the final say.
        let session = request.header.id().clone();
        let depth = request.header.delegation_depth().unwrap_or(0);
        if self.live.is_live(&session) {
            return Ok(SpawnReply {
                session,
                run: request.run().cloned(),
                node: self.cfg.node.clone(),
                depth,
                result: None,
            });
        }
        let now = self.now();
        let header = &request.header;
        let (log, shape, preset, policy_view) = match &request.kind {
            BirthKind::Child {
                descriptor, policy, ..
            } => {
                let shape = descriptor.mode;
                let mut log = match shape {
                    // Continuable: the descriptor right after the (empty) seed (P1).
                    SubagentShape::Continuable => {
                        seed_descriptor_turn(session.clone(), vec![], descriptor, now)?
                    }
                    // One-shot: the descriptor comes at the first pre-step.
                    SubagentShape::OneShot => SessionLog::create(session.clone(), vec![]),
                };
                // C3: the snapshot into the child's log, `source: "delegation"`.
                append_delegated_policy_overrides(&mut log, policy, now);
                // C1: the composition the child runs with; its children join it.
                let preset = Some(child_preset(
                    header.agent_preset(),
                    &descriptor.composition(),
                ));
                (log, Some(shape), preset, child_policy_view(policy))
            }
            BirthKind::TopLevel { policy, .. } => (
                SessionLog::create(session.clone(), vec![]),
                None,
                header.agent_preset().cloned(),
                *policy,
            ),
        };
        let mut log = log;
        let (idle_ttl, wake_on) = match &request.kind {
            BirthKind::TopLevel {
                idle_ttl_ms,
                wake_on,
                ..
            } => (*idle_ttl_ms, *wake_on),
            BirthKind::Child { .. } => (None, None),
        };
        let record = AgentRecord {
            agent: request.agent.clone(),
            policy_view,
            idle_ttl_ms: idle_ttl,
            wake_on,
        };
        let record = serde_json::to_value(&record)
            .map_err(|e| HostError::Internal(format!("cannot encode the agent record: {e}")))?;
        log.append(AGENT_EVENT, record, now);
        // Issue 39: the files it starts from, stored as its base (a root's upload is copied
        // there, checked against the digest its spawn named) and named in the creation window.
        if let Some(snapshot) = &request.workspace {
            let base = match snapshot.object == lineage_core::workspace::base_object(&session) {
                true => snapshot.clone(),
                false => {
                    self.adopt_upload(&request.request_id, &session, &snapshot.digest)
                        .await?
                }
            };
            let (kind, data) =
                lineage_core::journal::JournalEvent::WorkspaceSnapshot(base).to_parts();
            log.append(kind, data, now);
        }
        // The first prompt is accepted with the creation window (one message): the agent
        // takes its first turn on it as soon as it is live (none: a top-level session starts
        // idle, `Accepted::first_prompt`).
        let top_level = header.parent_session().is_none();
        if let Some(accepted) = Accepted::first_prompt(request.prompt.clone(), top_level) {
            let accepted = serde_json::to_value(&accepted)
                .map_err(|e| HostError::Internal(format!("cannot encode the first prompt: {e}")))?;
            log.append(ACCEPTED_EVENT, accepted, now);
        }
        // 1 and 2 at once: the whole creation window in one message (all of it or none) on an
        // empty log, and the commit that is the birth, hosted here. Nothing sees the child
        // before both are done; a node that stops between them leaves a `running` record with
        // an empty log, which whoever would resume it disposes (`Shared::dispose_cut_short`).
        // Until it is live here (or disposed), a resume of it here answers `Starting`.
        let _underway = BirthUnderway::new(self, &session);
        let window = self.bus.events.append_all(
            &session,
            log.events(),
            Some(lineage_bus::events::LogCursor::default()),
        );
        let register = self.register_hosted(registration(&request, now, &self.cfg.node));
        let (written, registered) = tokio::join!(window, register);
        let depth = match registered {
            Ok(CommandResponse::Registered {
                session: first,
                depth,
            }) if first != session => {
                // A retried spawn: its first birth is the answer (this log is never read).
                let node = self.check_first_birth(&first, &request.request_id).await?;
                return Ok(SpawnReply {
                    session: first,
                    run: None,
                    node,
                    depth,
                    result: None,
                });
            }
            Ok(CommandResponse::Registered { depth, .. }) => depth,
            Ok(other) => {
                return Err(HostError::Internal(format!(
                    "registry answered {other:?} to register_session"
                )))
            }
            Err(HostError::RegistryUnavailable(reason)) => {
                // Unknown whether it committed: a record that looks alive must not stay.
                self.dispose_unstarted(&session).await;
                return Err(HostError::RegistryUnavailable(reason));
            }
            Err(refused) => return Err(refused),
        };
        let cursor = match written {
            Ok(cursor) => cursor,
            Err(e) => {
                // Registered without its log: nothing could resume it, so it is disposed now.
                self.dispose_unstarted(&session).await;
                return Err(e.into());
            }
        };
        tracing::info!(%session, parent = ?header.parent_session(), depth, "session born");
        // 3: launch; a launch that fails disposes the birth.
        let started = self
            .launch_born(LaunchWindow {
                birth: request,
                shape,
                preset,
                policy_view,
                log,
                cursor,
                now,
            })
            .await;
        if started.is_err() {
            self.dispose_unstarted(&session).await;
        }
        started
    }

    /// Step 3: the agent task, `subagent/start`, the first turn; a one-shot's reply waits for
    /// its result.
    async fn launch_born(self: &Arc<Self>, window: LaunchWindow) -> Result<SpawnReply, HostError> {
        let (shape, now) = (window.shape, window.now);
        let Birth {
            header,
            agent,
            kind,
            ..
        } = window.birth;
        let session = header.id().clone();
        let depth = header.delegation_depth().unwrap_or(0);
        let parent = header.parent_session().cloned();
        let owner = lineage_core::routing::owner_of(
            parent.as_ref(),
            parent.as_ref().is_some_and(|p| self.live.is_live(p)),
        );
        let (idle_ttl, wake_on, mcp_servers) = match &kind {
            BirthKind::TopLevel {
                idle_ttl_ms,
                wake_on,
                mcp_servers,
                ..
            } => (
                *idle_ttl_ms,
                wake_on.unwrap_or_default(),
                mcp_servers.clone(),
            ),
            BirthKind::Child { .. } => (None, Default::default(), Vec::new()),
        };
        let (descriptor, run) = match kind {
            BirthKind::Child {
                descriptor,
                run,
                parent_node,
                ..
            } => {
                let info = parent.as_ref().map(|parent| SubagentRunInfo {
                    run_id: run.clone(),
                    provider: provider_of(&agent).to_owned(),
                    child_id: session.clone(),
                    parent_session_id: parent.clone(),
                    local: parent_node == self.cfg.node,
                    shape: descriptor.mode,
                    node: self.cfg.node.clone(),
                    at_ms: now,
                });
                (Some(descriptor), info)
            }
            BirthKind::TopLevel { .. } => (None, None),
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
                spec: agent,
                policy_view: window.policy_view,
                preset: window.preset,
                log: window.log,
                cursor: window.cursor,
                // The creation window is one message.
                log_messages: 1,
                run: run.clone(),
                owner,
                resumed: false,
                has_children: false,
                // Registered with its node: placement epoch 1.
                epoch: Some(1),
                idle_ttl,
                usage: None,
                wake_on,
                one_shot: result_tx,
                mcp_servers,
            },
        )
        .await?;
        let result = match result_rx {
            Some(rx) => Some(rx.await.unwrap_or(OneShotResult {
                output: None,
                structured: None,
                stop_reason: StopReason::Disposed,
                changes: None,
            })),
            None => None,
        };
        Ok(SpawnReply {
            session,
            run: run.map(|r| r.run_id),
            node: self.cfg.node.clone(),
            depth,
            result,
        })
    }
}

/// What the launch takes: the birth and its creation window.
struct LaunchWindow {
    birth: Birth,
    shape: Option<SubagentShape>,
    preset: Option<lineage_core::header::AgentPreset>,
    policy_view: lineage_core::policy::ParentPolicyView,
    log: SessionLog,
    cursor: lineage_bus::events::LogCursor,
    now: u64,
}

/// The registry's half of `birth`, hosted by `node` (the one place a birth becomes a
/// `RegisterSession`): the header, the typed descriptor, the first run and the limits.
fn registration(birth: &Birth, at_ms: u64, node: &NodeId) -> Command {
    Command::RegisterSession {
        request_id: birth.request_id.clone(),
        at_ms,
        header: birth.header.clone(),
        descriptor: birth.descriptor().cloned(),
        max_depth: birth.limits.max_depth,
        fan_out: birth.limits.fan_out,
        budget: birth.limits.budget,
        node: Some(node.clone()),
        run: birth.run().cloned(),
        start_within_ms: None,
        hosted: true,
    }
}

impl Shared {
    /// `RegisterSession` under the spawn's own request id, retried while the registry is
    /// unavailable (the request id makes a retry safe: a commit is answered, not repeated).
    async fn register_hosted(&self, command: Command) -> Result<CommandResponse, HostError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.registry.write(command.clone()).await {
                Err(HostError::RegistryUnavailable(reason))
                    if attempt < self.cfg.registry_attempts.max(1) =>
                {
                    tracing::warn!(%reason, attempt, "registry unavailable; retrying the birth");
                    tokio::time::sleep(std::time::Duration::from_millis(100 * u64::from(attempt)))
                        .await;
                }
                other => return other,
            }
        }
    }

    /// A birth whose launch failed (or whose registration is in doubt) is disposed, best
    /// effort: a record that looks alive must not stay behind. A dispose of a session that was
    /// never registered is refused and changes nothing.
    pub(crate) async fn dispose_unstarted(&self, session: &SessionId) {
        let _ = self
            .write(|request_id, at_ms| Command::Dispose {
                stop_reason: Some(StopReason::Failed),
                request_id,
                at_ms,
                session: session.clone(),
            })
            .await;
    }

    /// A retried spawn whose first attempt registered `session`: its node when that birth
    /// started; refused when it never did (disposed after its start failed, or by the
    /// sweeper), unavailable while it is still `starting`, so a retry completes or refuses and
    /// never reports success for a birth that did not start.
    async fn check_first_birth(
        &self,
        session: &SessionId,
        request_id: &RequestId,
    ) -> Result<NodeId, HostError> {
        let record = self
            .registry
            .session(session.clone())
            .await?
            .ok_or_else(|| HostError::UnknownSession(session.to_string()))?;
        match record.state {
            // Disposed: it never started, or it ran and is disposed (a one-shot that finished,
            // a drained child); its log says which, so the refusal does not mislead.
            SessionState::Disposed => {
                let ran = match self.bus.events.read(session).await {
                    Ok((events, _)) => events.iter().any(|e| e.kind == "turn/start"),
                    Err(e) => return Err(e.into()),
                };
                Err(HostError::BadRequest(if ran {
                    format!(
                        "request id {request_id} was used by an earlier spawn whose session {session} ran and is disposed (a one-shot that finished or a drained child: its turns and result are in its log); spawn again with a new request id"
                    )
                } else {
                    format!(
                        "request id {request_id} was used by an earlier spawn whose session {session} never started and is disposed; spawn again with a new request id"
                    )
                }))
            }
            SessionState::Starting => Err(HostError::Starting(session.to_string())),
            SessionState::Running | SessionState::Waiting | SessionState::Settled => Ok(record
                .placement
                .map_or_else(|| self.cfg.node.clone(), |p| p.node)),
        }
    }
}

impl Host {
    /// Per-node `start`: hosts a session registered by the spawning node, in a `start` span.
    pub async fn start_hosted(&self, request: StartRequest) -> Result<SpawnReply, HostError> {
        let op = op_span!("start", self.node());
        op.record("session", request.header.id())
            .record_opt("parent", request.header.parent_session())
            .record_opt("run", request.run())
            .record_opt("shape", request.descriptor().map(|d| d.mode.as_str()));
        let reply = op.run(self.shared.start_local(request)).await;
        if let Some(result) = reply.as_ref().ok().and_then(|r| r.result.as_ref()) {
            op.record("stop_reason", result.stop_reason.as_str());
        }
        reply
    }
}

/// A birth under way on this node ([`Shared::births`]), from before its registration until it
/// is live or disposed: dropping it ends it.
struct BirthUnderway<'a> {
    shared: &'a Shared,
    session: SessionId,
}

impl<'a> BirthUnderway<'a> {
    fn new(shared: &'a Shared, session: &SessionId) -> Self {
        if let Ok(mut births) = shared.live.births.lock() {
            births.insert(session.clone());
        }
        BirthUnderway {
            shared,
            session: session.clone(),
        }
    }
}

impl Drop for BirthUnderway<'_> {
    fn drop(&mut self) {
        if let Ok(mut births) = self.shared.live.births.lock() {
            births.remove(&self.session);
        }
    }
}

impl Shared {
    /// Whether the birth `request`'s agent can start in `snapshot` here (issue 39): its
    /// profile gives it a directory of its own, and takes a client's upload when it is one.
    fn check_files(
        &self,
        request: &StartRequest,
        snapshot: &lineage_core::workspace::WorkspaceSnapshot,
    ) -> Result<(), HostError> {
        let agent = lineage_drivers::driver::provider_of(&request.agent);
        let session = request.header.id();
        let Some(rule) = self.drivers.files_rule(&request.agent, session) else {
            return Err(HostError::BadRequest(format!(
                "agent {agent} has no directory of its own on node {} (a scripted agent, or a profile whose workdir is shared), so it cannot start in files; spawn it without a workspace, or use a profile whose workdir is \"session\"",
                self.cfg.node
            )));
        };
        let upload = snapshot.object == lineage_core::workspace::upload_object(&request.request_id);
        if upload && !rule.uploads {
            return Err(HostError::BadRequest(format!(
                "profile {agent} does not take a client's files (workspace_uploads = false on node {}); start it with --git URL --ref REF, or without a workspace",
                self.cfg.node
            )));
        }
        Ok(())
    }
}
