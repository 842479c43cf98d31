//! Spawn (S1, S2, S3, D2–D4, L1, C1–C3, P1, E1): the birth of a session.
//!
//! In the seed's order:
//!
//! 1. validate the max depth (D4, done where the request is parsed: [`MaxDepth`]);
//! 2. resolve the child's depth from the parent's frozen header (`delegation_depth_of`, D2, D3);
//! 3. capture the policy snapshot synchronously, before the first await (C2);
//! 4. build the child's frozen header with `child_session_meta` (L1), its deadline the
//!    earlier of the parent's and the spawn's `timeout_ms` (Q2);
//! 5. gather it all in one [`Birth`] and ask the target node to host it (this node, or any
//!    other through its per-node `start`), with the spawn's request id;
//! 6. on the hosting node ([`crate::start`]): its offer (T4: it runs only what its operator
//!    configured, refused before anything is written), the creation window, composition (C1), the
//!    policy events with `source: "delegation"` (C3), the descriptor (P1: continuable after the
//!    seed and before the first turn; one-shot at its first pre-step) and the accepted prompt,
//!    written to the log as one message; then `RegisterSession`, `hosted` by that node: the
//!    commit is the birth (idempotent by request id; refused when admission is closed or the
//!    depth is exceeded, G2); then `subagent/start` on the parent's start subject (E1), then
//!    the first turn with the prompt.
//!
//! A retried spawn (same request id) is answered with its first birth; one whose first birth
//! never started (disposed, or still `starting`) is refused, so a retry never reports success
//! for a birth that did not start.
//!
//! A one-shot child's result comes back to the caller (S1); a continuable child's results
//! reach its parent as settlement notices (S3).

use std::sync::Arc;

use lineage_core::depth::{delegation_depth_of, resolve_child_depth, MaxDepth};
use lineage_core::descriptor::{SubagentDescriptor, SubagentShape};
use lineage_core::header::{child_session_meta, AgentPreset, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_core::limits::BirthLimits;
use lineage_core::policy::{
    capture_delegated_policy_overrides, DelegatedPolicyOverrides, ParentPolicyView,
};
use lineage_core::routing::{route, Route};
use lineage_protocol::birth::{Birth, BirthKind};
use lineage_protocol::workspace::SpawnWorkspace;
use lineage_registry::types::{RegistryRefusal, SessionState};

use crate::agent::cmd::AgentCmd;
use crate::control::{Hop, SpawnReply, SpawnRequest};
use crate::error::HostError;
use crate::host::{provider_of, Host};
use crate::shared::Shared;
use crate::telemetry::op_span;
use lineage_drivers::driver::ChildSpec;

/// What a spawn needs from the (live) parent, read synchronously.
#[derive(Debug, Clone)]
pub(crate) struct ParentCtx {
    pub(crate) header: SessionHeader,
    pub(crate) policy_view: ParentPolicyView,
    pub(crate) preset: Option<AgentPreset>,
    /// Its tool filter: a child's can only narrow it (C1).
    pub(crate) tool_filter: Option<Vec<String>>,
    /// Its own directory of files and their caps, when it has a workspace (what `inherit`
    /// copies, issue 39).
    pub(crate) workspace: Option<(std::path::PathBuf, lineage_workspace::Caps)>,
}

impl Shared {
    /// Where a new session is born ([`lineage_core::routing::birth_target`]): while this node
    /// winds down, another node whose lease is current (spread by the new id).
    async fn birth_target(&self, requested: Option<&NodeId>, id: &SessionId) -> NodeId {
        let winding = self.lifetime.winding_down();
        let now = self.now();
        let live_others: Vec<NodeId> = match (requested, winding) {
            (None, true) => match self.registry.nodes().await {
                Ok(nodes) => nodes
                    .into_iter()
                    .filter(|n| n.lease_expires_at_ms > now && n.node != self.cfg.node)
                    .map(|n| n.node)
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list the nodes; the birth stays here");
                    Vec::new()
                }
            },
            _ => Vec::new(),
        };
        let spread = id.as_str().bytes().map(usize::from).sum();
        lineage_core::routing::birth_target(
            requested,
            &self.cfg.node,
            winding,
            &live_others,
            spread,
        )
    }

    /// Spawns a child of a live parent (steps 1–6). `adopt` sends the adoption to the parent's
    /// mailbox (spawn requested from outside the parent's own turn).
    pub(crate) async fn spawn_child(
        self: &Arc<Self>,
        parent: ParentCtx,
        spec: ChildSpec,
        request_id: RequestId,
        max_depth: Option<MaxDepth>,
        adopt: bool,
    ) -> Result<SpawnReply, HostError> {
        let (began, shape) = (self.now(), spec.shape);
        let out = self
            .birth_of_child(parent, spec, request_id, max_depth, adopt)
            .await;
        let took = self.now().saturating_sub(began);
        self.metrics.spawn_outcome(&out, took, Some(shape));
        out
    }

    async fn birth_of_child(
        self: &Arc<Self>,
        parent: ParentCtx,
        spec: ChildSpec,
        request_id: RequestId,
        max_depth: Option<MaxDepth>,
        adopt: bool,
    ) -> Result<SpawnReply, HostError> {
        self.lifetime.check_running()?;
        // 1-3: depth, policy and deadline, all synchronous (C2: before the first await).
        let deadline = spec.timeout_ms.map(|t| t.deadline_from(self.now()));
        let max_depth = max_depth.or(self.cfg.max_depth);
        let parent_depth = delegation_depth_of(&parent.header, None);
        let child_depth = resolve_child_depth(parent_depth, max_depth)?;
        let policy = capture_delegated_policy_overrides(&parent.policy_view);
        // 4: the frozen header (L1).
        let child_id = spec.session.clone().unwrap_or_else(|| self.mint.session());
        let header = child_session_meta(
            &parent.header,
            child_id.clone(),
            child_depth,
            0,
            parent.preset.clone(),
        )?
        .with_deadline(deadline);
        let descriptor = SubagentDescriptor {
            provider: provider_of(&spec.agent).to_owned(),
            label: spec.label.clone(),
            mode: spec.shape,
            // C1: the child joins its parent's composition; its filter only narrows.
            tool_filter: lineage_core::composition::inherit_tool_filter(
                parent.tool_filter.as_deref(),
                spec.tool_filter.clone(),
            ),
            persona: spec.persona.clone(),
        };
        descriptor.validate()?;
        let workspace = self.child_workspace(&parent, &spec, &child_id).await?;
        let target = self.birth_target(spec.node.as_ref(), &child_id).await;
        // 5: the target hosts it (it checks its offer, T4): creation window, then the birth,
        // then the launch.
        let request = Birth {
            request_id,
            header,
            agent: spec.agent,
            prompt: spec.prompt,
            limits: BirthLimits {
                max_depth,
                fan_out: self.cfg.fan_out,
                budget: spec.budget,
            },
            kind: BirthKind::Child {
                descriptor,
                run: self.mint.run(),
                policy,
                parent_node: self.cfg.node.clone(),
            },
            workspace,
        };
        // A one-shot child reports to its parent's inbox while it runs (M1): a parent that
        // spawned it from outside its own turn reads that inbox from now on.
        if adopt && spec.shape == SubagentShape::OneShot {
            let _ = self.live.send(parent.header.id(), AgentCmd::OpenInbox);
        }
        let reply = self
            .started(&child_id, self.start_on(&target, request, spec.shape).await)
            .await?;
        if reply.session == child_id {
            self.metrics.spawned(Some(spec.shape));
            tracing::info!(parent = %parent.header.id(), child = %child_id, depth = child_depth, node = %reply.node, shape = spec.shape.as_str(), "child spawned");
        } else {
            self.forget_files(&child_id).await;
        }
        if adopt && spec.shape == SubagentShape::Continuable {
            let _ = self
                .live
                .send(parent.header.id(), AgentCmd::Adopt(reply.session.clone()));
        }
        Ok(reply)
    }

    /// The files a child starts from (issue 39, [`lineage_core::workspace::child_files`]): a
    /// copy of its parent's as they are now, stored as the child's base, or none.
    async fn child_workspace(
        &self,
        parent: &ParentCtx,
        spec: &ChildSpec,
        child: &SessionId,
    ) -> Result<Option<lineage_core::workspace::WorkspaceSnapshot>, HostError> {
        use lineage_core::workspace::{child_files, ChildChoice, ChildFiles};
        let choice = match &spec.workspace {
            None => ChildChoice::Unsaid,
            Some(SpawnWorkspace::Inherit) => ChildChoice::Inherit,
            Some(SpawnWorkspace::Empty) => ChildChoice::Empty,
            Some(SpawnWorkspace::Uploaded { .. } | SpawnWorkspace::Git { .. }) => {
                ChildChoice::RootOnly
            }
        };
        let holds = self.drivers.files_rule(&spec.agent, child).is_some();
        let files = child_files(
            choice,
            parent.header.id(),
            parent.workspace.is_some(),
            holds,
        )
        .map_err(HostError::BadRequest)?;
        match (files, &parent.workspace) {
            (ChildFiles::ParentCopy, Some((dir, caps))) => {
                Ok(Some(self.inherit_files(dir, *caps, child).await?))
            }
            (ChildFiles::ParentCopy, None) | (ChildFiles::Nothing, _) => Ok(None),
        }
    }

    /// Starts a new session on `target` (here or through its per-node `start`).
    pub(crate) async fn start_on(
        self: &Arc<Self>,
        target: &NodeId,
        request: Birth,
        shape: SubagentShape,
    ) -> Result<SpawnReply, HostError> {
        if target == &self.cfg.node {
            return self.start_local(request).await;
        }
        match shape {
            SubagentShape::Continuable => {
                self.node_request(
                    target,
                    crate::control::ops::START,
                    &request,
                    self.cfg.request_timeout,
                )
                .await
            }
            // A one-shot's reply comes when its run is over, which may be long: watch the
            // hosting node and the child meanwhile, so the node's death, or the child's end
            // with no reply (its node restarted before its lease lapsed, and its re-adoption
            // disposed the orphaned run), ends the wait (the caller then disposes the child)
            // instead of the whole one-shot timeout.
            SubagentShape::OneShot => {
                let child = request.header.id().clone();
                let run = self.node_request(
                    target,
                    crate::control::ops::START,
                    &request,
                    self.cfg.one_shot_timeout,
                );
                tokio::pin!(run);
                let gone = tokio::select! {
                    reply = &mut run => return reply,
                    gone = self.until_gone(target, &child) => gone,
                };
                match gone {
                    OneShotGone::NodeDead => Err(HostError::Unavailable(format!(
                        "node {target} stopped (its lease expired) while it ran one-shot child {child}; the child is disposed, spawn it again"
                    ))),
                    // A run that ended well is disposed with its last events and answered at
                    // once: its reply gets a while to arrive.
                    OneShotGone::Disposed => {
                        match tokio::time::timeout(ONE_SHOT_REPLY_GRACE, &mut run).await {
                            Ok(reply) => reply,
                            Err(_) => Err(HostError::Unavailable(format!(
                                "one-shot child {child} ended on node {target} with no answer (its node restarted); spawn it again"
                            ))),
                        }
                    }
                }
            }
        }
    }

    /// Returns once `node`'s lease has expired or `child` is disposed (checked every lease
    /// period).
    async fn until_gone(&self, node: &NodeId, child: &SessionId) -> OneShotGone {
        let every = self.cfg.lease.max(std::time::Duration::from_millis(200));
        loop {
            tokio::time::sleep(every).await;
            if let Ok(false) = self.node_alive(node).await {
                return OneShotGone::NodeDead;
            }
            if let Ok(Some(record)) = self.registry.session(child.clone()).await {
                if record.state == SessionState::Disposed {
                    return OneShotGone::Disposed;
                }
            }
        }
    }

    /// Registers and starts a new top-level session.
    pub(crate) async fn spawn_root(
        self: &Arc<Self>,
        request: SpawnRequest,
        max_depth: Option<MaxDepth>,
    ) -> Result<SpawnReply, HostError> {
        let began = self.now();
        let out = self.birth_of_root(request, max_depth).await;
        let took = self.now().saturating_sub(began);
        self.metrics.spawn_outcome(&out, took, None);
        out
    }

    async fn birth_of_root(
        self: &Arc<Self>,
        request: SpawnRequest,
        max_depth: Option<MaxDepth>,
    ) -> Result<SpawnReply, HostError> {
        self.lifetime.check_running()?;
        let session = self.mint.session();
        lineage_drivers::profiles::request_subdir(request.cwd.as_deref())?;
        lineage_protocol::editor_mcp::check_passed_servers(&request.mcp_servers)
            .map_err(HostError::BadRequest)?;
        let deadline = request.timeout_ms.map(|t| t.deadline_from(self.now()));
        let header = SessionHeader::top_level(session.clone(), request.cwd, request.preset)
            .with_deadline(deadline);
        let request_id = request.request_id.unwrap_or_else(|| self.mint.request());
        let workspace = match request.workspace {
            None => None,
            Some(SpawnWorkspace::Uploaded { digest }) => {
                lineage_workspace::Digest::parse(&digest)?;
                Some(lineage_core::workspace::WorkspaceSnapshot::whole(
                    lineage_core::workspace::upload_object(&request_id),
                    digest,
                ))
            }
            Some(SpawnWorkspace::Git { url, reference }) => {
                Some(self.clone_files(&url, &reference, &session).await?)
            }
            Some(SpawnWorkspace::Inherit | SpawnWorkspace::Empty) => {
                return Err(HostError::BadRequest(
                    "a top-level session has no parent to inherit files from; give it an upload (lineage spawn --workspace DIR) or none".into(),
                ))
            }
        };
        let target = self.birth_target(request.node.as_ref(), &session).await;
        let start = Birth {
            request_id,
            header,
            agent: request.agent,
            prompt: request.prompt,
            limits: BirthLimits {
                max_depth: max_depth.or(self.cfg.max_depth),
                fan_out: self.cfg.fan_out,
                budget: request.budget,
            },
            kind: BirthKind::TopLevel {
                policy: request.policy.unwrap_or_default(),
                idle_ttl_ms: lineage_core::idle::IdleTtl::effective(
                    request.idle_ttl_ms,
                    self.cfg.idle_root,
                ),
                wake_on: request.wake_on,
                mcp_servers: request.mcp_servers,
            },
            workspace,
        };
        let started = self
            .start_on(&target, start, SubagentShape::Continuable)
            .await;
        let reply = self.started(&session, started).await?;
        if reply.session == session {
            self.metrics.spawned(None);
        } else {
            self.forget_files(&session).await;
        }
        Ok(reply)
    }

    /// A retried spawn (its request id already answered by `reply`'s session) leaves no files
    /// under the session id this try minted and the registry never recorded (issue 39).
    async fn forget_files(&self, never_born: &SessionId) {
        let objects = lineage_core::workspace::session_objects(never_born).to_vec();
        if let Err(e) = self.bus.workspaces.delete(&objects).await {
            tracing::warn!(session = %never_born, error = %e, "cannot remove the files of a retried spawn's unborn session");
        }
    }
}

impl Shared {
    /// A start that failed here (its node stopped, or did not answer) may have registered the
    /// birth there: disposed, best effort, so no record that looks alive stays behind (a
    /// session that was never registered is refused and nothing changes).
    async fn started(
        &self,
        session: &SessionId,
        started: Result<SpawnReply, HostError>,
    ) -> Result<SpawnReply, HostError> {
        if started.is_err() {
            self.dispose_unstarted(session).await;
        }
        started
    }
}

/// How long a one-shot caller waits for the reply of a child found disposed: a run that ended
/// well is answered at once, so a reply later than this is not coming.
const ONE_SHOT_REPLY_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Why a one-shot caller stopped waiting for its child's reply.
enum OneShotGone {
    /// The hosting node's lease expired.
    NodeDead,
    /// The child is disposed (its run ended, or its node's re-adoption disposed it).
    Disposed,
}

/// A child's own policy view: its delegated sandbox mode, and "has an approval service" when
/// its approval policy is `never`, so its children inherit `never` too (C2).
pub(crate) fn child_policy_view(policy: &DelegatedPolicyOverrides) -> ParentPolicyView {
    ParentPolicyView {
        sandbox_override: policy.sandbox_mode,
        has_approval_service: policy.approval_policy.is_some(),
    }
}

impl Host {
    /// `spawn`: a new top-level session (no parent), or a child of `request.parent`, which must
    /// be live on this node (the service forwards to the node that hosts it). Runs in a `spawn`
    /// span (see [`crate::telemetry`]).
    pub async fn spawn(&self, request: SpawnRequest) -> Result<SpawnReply, HostError> {
        self.spawn_via(request, Hop::Client).await
    }

    /// [`Host::spawn`] of a request that reached this node by `hop` (a forwarded one is never
    /// forwarded again).
    pub async fn spawn_via(
        &self,
        request: SpawnRequest,
        hop: Hop,
    ) -> Result<SpawnReply, HostError> {
        let op = op_span!("spawn", self.node());
        op.record_opt("parent", request.parent.as_ref())
            .record_opt("shape", request.shape.map(|s| s.as_str()));
        let reply = op.run(self.route_spawn(request, hop)).await;
        if let Ok(reply) = &reply {
            op.record("session", &reply.session)
                .record_opt("run", reply.run.as_ref());
        }
        reply
    }

    /// A top-level spawn is born here; a child's, where its parent is live (here, or the
    /// node it is forwarded to once).
    async fn route_spawn(&self, request: SpawnRequest, hop: Hop) -> Result<SpawnReply, HostError> {
        let max_depth = request.max_depth;
        let Some(parent) = request.parent.clone() else {
            lineage_core::header::check_top_level(request.shape, request.label.as_deref())?;
            return self.shared.spawn_root(request, max_depth).await;
        };
        if request.wake_on.is_some() {
            return Err(HostError::BadRequest(
                "what wakes a session is chosen for a top-level session; a child wakes on its messages: leave wake_on out, or spawn without a parent".to_owned(),
            ));
        }
        if request.idle_ttl_ms.is_some() {
            return Err(HostError::BadRequest(
                "an idle TTL ends a top-level session's tree; a child ends with its parent: leave --idle-ttl out, or spawn without --parent".to_owned(),
            ));
        }
        if !request.mcp_servers.is_empty() {
            return Err(HostError::BadRequest(
                "mcp_servers are an editor's, for the root of its session; a child gets lineage's tools only: leave them out, or spawn without a parent".to_owned(),
            ));
        }
        let handle = self.shared.live.handle(&parent);
        let Some(handle) = handle else {
            return self.spawn_elsewhere(parent, request, hop).await;
        };
        let shape = request.shape.ok_or_else(|| {
            HostError::BadRequest("a child spawn needs a shape: one-shot or continuable".to_owned())
        })?;
        let ctx = ParentCtx {
            header: handle.header.clone(),
            policy_view: handle.policy_view,
            preset: handle.preset.clone(),
            tool_filter: handle.tool_filter.clone(),
            workspace: handle.workspace.clone(),
        };
        let spec = ChildSpec {
            shape,
            agent: request.agent,
            prompt: request.prompt,
            node: request.node,
            label: request.label,
            persona: request.persona,
            tool_filter: request.tool_filter,
            timeout_ms: request.timeout_ms,
            budget: request.budget,
            workspace: request.workspace,
            session: None,
        };
        let request_id = request
            .request_id
            .unwrap_or_else(|| self.shared.mint.request());
        self.shared
            .spawn_child(ctx, spec, request_id, max_depth, true)
            .await
    }

    /// The parent is not live here: forward to the node that hosts it, once.
    ///
    /// The registry record is checked first: a disposed parent, or one whose admission is
    /// closed (a drain began), is refused here with the registry's own refusal (X1, G2), not
    /// reported as "not live" (which would suggest resuming it).
    async fn spawn_elsewhere(
        &self,
        parent: SessionId,
        request: SpawnRequest,
        hop: Hop,
    ) -> Result<SpawnReply, HostError> {
        let record = self
            .shared
            .registry
            .session(parent.clone())
            .await?
            .ok_or_else(|| HostError::UnknownSession(parent.to_string()))?;
        if let Some(refusal) = record.child_refusal() {
            // The registry refuses a birth under a spent budget (Q3) before anything else, so
            // a tree drained because its budget was spent says so, with the numbers.
            let spent = self
                .shared
                .registry
                .spent_budget_over(parent.clone())
                .await?;
            return Err(HostError::Refused(match spent {
                Some(spent) => RegistryRefusal::BudgetSpent(spent),
                None => refusal,
            }));
        }
        let here = &self.shared.cfg.node;
        let placement = record.placement.as_ref().and_then(|p| p.host());
        match route(record.state, placement, here, hop.is_forwarded()) {
            Route::Forward(node) => {
                if !self.shared.node_alive(&node).await? {
                    return Err(HostError::NodeDown {
                        session: parent.to_string(),
                        node: node.to_string(),
                    });
                }
                let timeout = match request.shape {
                    Some(SubagentShape::OneShot) => self.shared.cfg.one_shot_timeout,
                    Some(SubagentShape::Continuable) | None => self.shared.cfg.request_timeout,
                };
                self.shared
                    .forward(&node, crate::control::ops::SPAWN, &request, timeout)
                    .await
            }
            // Not live anywhere a spawn could reach: named after its node (this one for a
            // forwarded request, which the sender found elsewhere).
            Route::Here => Err(HostError::NotLive {
                session: parent.to_string(),
                node: placement
                    .filter(|_| !hop.is_forwarded())
                    .unwrap_or(here)
                    .to_string(),
            }),
        }
    }
}
