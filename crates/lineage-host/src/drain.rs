//! Drain (X1, H2): close admission, stop live descendants, dispose leaves first.
//!
//! 1. Close admission on the roots' subtrees in one registry write, first: no child slips in,
//!    and every child registered before it is in the snapshot that follows.
//! 2. Read the subtrees of the roots from the registry; a session counts as hosted on its
//!    placement node only when it is running or waiting and that node's lease is current (a
//!    dead node's sessions, and settled ones, are cold).
//! 3. Plan with `lineage_core::drain::plan_drain`.
//! 4. Stop the live strict descendants on their nodes (per-node `stop`: the turn is cancelled
//!    and no new turn starts).
//! 5. Dispose in waves, leaves first: a hosted session is released on its node first (per-node
//!    `release`: it settles with stop reason `disposed` and leaves), then disposed in the
//!    registry; a cold one is disposed straight from the registry. The registry refuses to
//!    dispose a session whose children are not disposed, so the order is enforced twice and
//!    checkable afterwards. Within a wave the releases go to every node at once and the
//!    disposals go [`DISPOSE_PER_WRITE`] to a registry write of several commands, with
//!    [`DISPOSE_WRITES_IN_FLIGHT`] such writes in flight (each disposal keeps its own request
//!    id and outcome; the registry commits them in entries of up to 256); the next wave starts
//!    only when every write of this one is answered.
//! 6. Delete the inbox consumers of the disposed sessions (the ones that exist: one listing of
//!    the inbox stream, then concurrent deletions), before the reply.
//!
//! The report counts every wave per kind and per node; it lists sessions one by one only up to
//! [`DRAIN_REPORT_CAP`], so the reply fits in a NATS message whatever the drain's size.
//!
//! Live progress: when the request names a drain id, the node publishes [`DrainProgress`]
//! messages on `lineage.<cluster>.drain.<id>.progress` (core NATS): the plan once it is ready,
//! then per wave a start (`done` 0), progress as disposals are acknowledged (at most one per
//! `lineage_core::drain::PROGRESS_INTERVAL_MS`, decided by `ProgressThrottle`) and an end (`done == total`). A
//! publish that fails is logged at debug level; it never fails the drain.

use std::sync::Arc;

use futures::future::join_all;
use futures::stream::{self, StreamExt};
use lineage_core::drain::{
    plan_drain, DrainInput, DrainSession, DrainSessionState, DrainWave, ProgressThrottle,
};
use lineage_core::ids::{DrainId, NodeId, SessionId};
use lineage_core::messages::StopReason;
use lineage_registry::types::{Command, CommandResponse, SessionState};

use crate::agent::cmd::AgentCmd;
use crate::control::{
    ops, Disposal, DisposalKind, DrainProgress, DrainReport, StopReply, StopRequest, WaveSummary,
    DRAIN_REPORT_CAP,
};
use crate::error::HostError;
use crate::host::Host;
use crate::shared::Shared;
use crate::telemetry::op_span;

/// Registry disposals a drain sends in one write of several commands (one Raft entry's worth:
/// `lineage_registry::node::MAX_BATCH_COMMANDS`).
pub const DISPOSE_PER_WRITE: usize = 256;

/// Writes of disposals a drain keeps in flight within one wave.
pub const DISPOSE_WRITES_IN_FLIGHT: usize = 4;

/// Where a drain's progress goes, when its request asked for it.
struct Progress {
    control: Arc<dyn lineage_bus::ports::ControlTransport>,
    drain: DrainId,
}

impl Progress {
    /// Publishes a wave's `disposing` progress when `throttle` says it is due.
    async fn disposing(
        &self,
        throttle: &mut ProgressThrottle,
        now_ms: u64,
        wave: usize,
        waves: usize,
        done: u64,
        total: u64,
    ) {
        if throttle.should_send(now_ms, done, total) {
            self.send(DrainProgress::disposing(
                self.drain.clone(),
                wave,
                waves,
                done,
                total,
            ))
            .await;
        }
    }

    /// Publishes one message, best effort.
    async fn send(&self, message: DrainProgress) {
        let body = match serde_json::to_vec(&message) {
            Ok(body) => body,
            Err(e) => {
                tracing::debug!(error = %e, "cannot encode drain progress");
                return;
            }
        };
        if let Err(e) = self.control.progress(&self.drain, body).await {
            tracing::debug!(drain = %self.drain, error = %e, "cannot publish drain progress");
        }
    }
}

impl Shared {
    pub(crate) async fn drain(
        self: &Arc<Self>,
        roots: Vec<SessionId>,
        progress: Option<DrainId>,
        reason: StopReason,
    ) -> Result<DrainReport, HostError> {
        if roots.is_empty() {
            return Err(HostError::BadRequest(
                "drain needs at least one root session".to_owned(),
            ));
        }
        let progress = progress.map(|drain| Progress {
            control: self.bus.control.clone(),
            drain,
        });
        let mut report = DrainReport::default();
        // 1. Close admission on the whole subtrees, one write, before anything is read: a
        // child registered after this is refused, and every child registered before it is in
        // the (linearizable) snapshot below, so none escapes the plan.
        let closed = self
            .write(|request_id, at_ms| Command::CloseAdmission {
                request_id,
                at_ms,
                roots: roots.clone(),
            })
            .await?;
        let mut closed = match closed {
            CommandResponse::AdmissionClosed { sessions } => sessions,
            _ => Vec::new(),
        };
        report.closed_count = closed.len() as u64;
        if closed.len() > DRAIN_REPORT_CAP {
            closed.truncate(DRAIN_REPORT_CAP);
            report.truncated = true;
        }
        report.closed = closed;
        // 2. Snapshot.
        let mut sessions: Vec<DrainSession> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut alive: std::collections::BTreeMap<NodeId, bool> = std::collections::BTreeMap::new();
        for root in &roots {
            let subtree = self.registry.subtree(root.clone()).await?;
            if subtree.is_empty() {
                return Err(HostError::UnknownSession(root.to_string()));
            }
            for record in subtree {
                if !seen.insert(record.id().clone()) {
                    continue;
                }
                let active = matches!(record.state, SessionState::Running | SessionState::Waiting);
                // A released placement is hosted nowhere (its node handed it off): cold.
                let host = record.placement.as_ref().and_then(|p| p.host());
                let node = match (host, active) {
                    (Some(host), true) => {
                        let ok = match alive.get(host) {
                            Some(ok) => *ok,
                            None => {
                                let ok = self.node_alive(host).await?;
                                alive.insert(host.clone(), ok);
                                ok
                            }
                        };
                        ok.then(|| host.clone())
                    }
                    (Some(_), false) | (None, _) => None,
                };
                // A settled session may still be live here for a moment: release it too.
                let node = node.or_else(|| {
                    self.live
                        .is_live(record.id())
                        .then(|| self.cfg.node.clone())
                });
                sessions.push(DrainSession {
                    id: record.id().clone(),
                    parent: record.header.parent_session().cloned(),
                    node,
                    state: if record.state == SessionState::Disposed {
                        DrainSessionState::Disposed
                    } else {
                        DrainSessionState::Live
                    },
                });
            }
        }
        // 3. Plan.
        let plan = plan_drain(&DrainInput {
            roots: roots.clone(),
            sessions,
        })?;
        // Disposed before the drain began: in no wave, but counted (the totals add up to the
        // sessions closed to admission).
        report.totals.already_disposed += plan.already_disposed;
        if let Some(p) = &progress {
            let sizes = plan.waves.iter().map(|w| w.len() as u64).collect();
            p.send(DrainProgress::planned(p.drain.clone(), sizes)).await;
        }
        // 4. Stop live descendants where they run, every node at once.
        let stops = join_all(plan.cancel.iter().map(|(node, ids)| async move {
            (node, self.on_node(node, ops::STOP, ids, reason).await)
        }))
        .await;
        for (node, result) in stops {
            if let Err(e) = result {
                report
                    .warnings
                    .push(format!("stop on node {node} failed: {e}"));
            }
        }
        // 5. Waves, leaves first; then the inbox consumers of the disposed sessions (also when
        // a wave failed), before the reply.
        let mut disposed: Vec<SessionId> = Vec::new();
        let mut cold: Vec<SessionId> = Vec::new();
        let outcome = self
            .waves(
                &plan.waves,
                &mut report,
                (&mut disposed, &mut cold),
                progress.as_ref(),
                reason,
            )
            .await;
        // A cold session's agent may have another side (a remote A2A task): tell it.
        self.tell_remote_ends(&cold).await;
        if let Err(e) = self.bus.inbox.delete_consumers(&disposed).await {
            report
                .warnings
                .push(format!("deleting inbox consumers failed: {e}"));
        }
        outcome.map(|()| report)
    }

    /// Drain step 5: each wave is released on its nodes (one `release` per node, the nodes at
    /// once), then disposed in the registry, [`DISPOSE_PER_WRITE`] disposals a write and
    /// [`DISPOSE_WRITES_IN_FLIGHT`] writes in flight. A wave starts only once every write
    /// of the previous one is acknowledged, so parents are disposed after their children. Every
    /// session written (disposed or found disposed) is pushed to `disposed`, and those this
    /// drain disposed from the registry alone (hosted nowhere: cold) to `cold`. With
    /// `progress`, each wave's start, progress (throttled) and end are published.
    async fn waves(
        self: &Arc<Self>,
        waves: &[DrainWave],
        report: &mut DrainReport,
        (disposed, cold): (&mut Vec<SessionId>, &mut Vec<SessionId>),
        progress: Option<&Progress>,
        reason: StopReason,
    ) -> Result<(), HostError> {
        let mut listed = 0usize;
        let count = waves.len();
        for (index, wave) in waves.iter().enumerate() {
            let total = wave.len() as u64;
            let mut throttle = ProgressThrottle::new();
            let mut done = 0u64;
            if let Some(p) = progress {
                p.disposing(&mut throttle, self.now(), index, count, done, total)
                    .await;
            }
            // Released there (or already gone after its stop settled it), unless the node
            // could not be reached: then straight from the registry.
            let releases = join_all(wave.by_node.iter().map(|(node, ids)| async move {
                (
                    node,
                    ids,
                    self.on_node(node, ops::RELEASE, ids, reason).await,
                )
            }))
            .await;
            let mut items: Vec<(SessionId, Option<NodeId>)> = Vec::with_capacity(wave.len());
            for (node, ids, result) in releases {
                let reached = match result {
                    Ok(_) => true,
                    Err(e) => {
                        report.warnings.push(format!(
                            "release on node {node} failed: {e}; disposing from the registry"
                        ));
                        false
                    }
                };
                items.extend(
                    ids.iter()
                        .map(|id| (id.clone(), reached.then(|| node.clone()))),
                );
            }
            items.extend(wave.unplaced.iter().map(|id| (id.clone(), None)));
            let chunks: Vec<Vec<(SessionId, Option<NodeId>)>> =
                items.chunks(DISPOSE_PER_WRITE).map(<[_]>::to_vec).collect();
            let mut writes = stream::iter(chunks)
                .map(|chunk| {
                    let this = Arc::clone(self);
                    async move {
                        let ids = chunk.iter().map(|(id, _)| id.clone()).collect();
                        let kinds = this.dispose_many(ids, reason).await;
                        (chunk, kinds)
                    }
                })
                .buffer_unordered(DISPOSE_WRITES_IN_FLIGHT);
            let mut tally = WaveTally {
                list: Vec::new(),
                summary: WaveSummary::default(),
                listed: &mut listed,
            };
            let mut failed = None;
            while let Some((chunk, kinds)) = writes.next().await {
                let kinds = match kinds {
                    Ok(kinds) => kinds,
                    // Not known to be applied: neither counted nor listed as disposed.
                    Err(e) => {
                        failed.get_or_insert(e);
                        continue;
                    }
                };
                for ((id, node), kind) in chunk.into_iter().zip(kinds) {
                    let kind = match kind {
                        Ok(kind) => kind,
                        Err(e) => {
                            // Every write of the wave is answered first (so `disposed` is exact),
                            // then the drain fails.
                            failed.get_or_insert(e);
                            continue;
                        }
                    };
                    done += 1;
                    if let Some(p) = progress {
                        p.disposing(&mut throttle, self.now(), index, count, done, total)
                            .await;
                    }
                    tally.count(id, node, kind, report, (&mut *disposed, &mut *cold));
                }
            }
            report.waves.push(tally.list);
            report.summary.push(tally.summary);
            if let Some(e) = failed {
                return Err(e);
            }
            if let Some(p) = progress {
                p.send(DrainProgress::wave_done(
                    p.drain.clone(),
                    index,
                    count,
                    done,
                ))
                .await;
            }
        }
        Ok(())
    }

    /// Registry disposes of `sessions`, in one write of several commands: one outcome per
    /// session, in order; `Err` when the registry could not be reached.
    async fn dispose_many(
        &self,
        sessions: Vec<SessionId>,
        reason: StopReason,
    ) -> Result<Vec<Result<DisposalKind, HostError>>, HostError> {
        let at_ms = self.now();
        let commands = sessions
            .into_iter()
            .map(|session| Command::Dispose {
                stop_reason: Some(reason),
                request_id: self.mint.request(),
                at_ms,
                session,
            })
            .collect();
        let outcomes = self.registry.write_many(commands).await?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| {
                outcome.map(|response| match response {
                    CommandResponse::Disposed { already: true, .. } => {
                        DisposalKind::AlreadyDisposed
                    }
                    _ => DisposalKind::RegistryOnly,
                })
            })
            .collect())
    }

    /// Per-node `stop` or `release`, here or on `node`.
    async fn on_node(
        self: &Arc<Self>,
        node: &NodeId,
        op: &str,
        ids: &[SessionId],
        reason: StopReason,
    ) -> Result<StopReply, HostError> {
        let request = StopRequest {
            sessions: ids.to_vec(),
            reason: (reason != StopReason::Disposed).then_some(reason),
        };
        if node == &self.cfg.node {
            return Ok(match op {
                ops::RELEASE => self.release_local(request).await,
                _ => self.stop_local(request).await,
            });
        }
        self.node_request(node, op, &request, self.cfg.request_timeout)
            .await
    }

    /// Per-node `stop`: cancel the current turn, take no new turns.
    pub(crate) async fn stop_local(&self, request: StopRequest) -> StopReply {
        let mut reply = StopReply::default();
        let reason = request.reason.unwrap_or(StopReason::Disposed);
        for id in request.sessions {
            match self
                .queue_then_cancel(&id, |reply| AgentCmd::Stop {
                    reason,
                    reply,
                    trace: lineage_bus::trace::current(),
                })
                .await
            {
                Ok(()) => reply.done.push(id),
                Err(_) => reply.not_live.push(id),
            }
        }
        reply
    }

    /// Per-node `release`: settle (stop reason `disposed`) and leave; waits until gone.
    pub(crate) async fn release_local(&self, request: StopRequest) -> StopReply {
        let mut reply = StopReply::default();
        let reason = request.reason.unwrap_or(StopReason::Disposed);
        for id in request.sessions {
            match self
                .queue_then_cancel(&id, |reply| AgentCmd::Release {
                    reason,
                    reply,
                    trace: lineage_bus::trace::current(),
                })
                .await
            {
                Ok(()) => {
                    // Wait until the task has left the table.
                    for _ in 0..200 {
                        if !self.live.is_live(&id) {
                            break;
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                    reply.done.push(id)
                }
                Err(_) => reply.not_live.push(id),
            }
        }
        reply
    }

    /// Queues a stop or release in the agent's mailbox, then cancels its running turn, then
    /// waits for the answer. In that order the command is already queued when the cancelled
    /// turn ends, so the agent settles with stop reason `disposed`, not `interrupted` (X1).
    async fn queue_then_cancel(
        &self,
        id: &SessionId,
        make: impl FnOnce(tokio::sync::oneshot::Sender<()>) -> AgentCmd,
    ) -> Result<(), HostError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.live.send(id, make(tx))?;
        if let Some(handle) = self.live.handle(id) {
            if let Ok(slot) = handle.turn.lock() {
                if let Some(token) = slot.as_ref() {
                    token.cancel();
                }
            }
        }
        rx.await.map_err(|_| self.live.not_live(id))
    }
}

/// One wave's disposals as they are acknowledged: its list for the report (up to
/// [`DRAIN_REPORT_CAP`] over the whole drain, counted in `listed`) and its summary.
struct WaveTally<'a> {
    list: Vec<Disposal>,
    summary: WaveSummary,
    listed: &'a mut usize,
}

impl WaveTally<'_> {
    /// Counts the disposal of `id` (released on `node`, or from the registry alone): in
    /// `disposed`, in `cold` when it was hosted nowhere, in the wave's summary and list and
    /// the report's totals.
    fn count(
        &mut self,
        id: SessionId,
        node: Option<NodeId>,
        kind: DisposalKind,
        report: &mut DrainReport,
        (disposed, cold): (&mut Vec<SessionId>, &mut Vec<SessionId>),
    ) {
        disposed.push(id.clone());
        let kind = match (kind, &node) {
            (DisposalKind::AlreadyDisposed, _) => DisposalKind::AlreadyDisposed,
            (_, Some(_)) => DisposalKind::Released,
            (_, None) => DisposalKind::RegistryOnly,
        };
        if kind == DisposalKind::RegistryOnly {
            cold.push(id.clone());
        }
        self.summary.counts.add(kind);
        report.totals.add(kind);
        if let Some(node) = &node {
            *self.summary.by_node.entry(node.clone()).or_default() += 1;
        }
        if *self.listed < DRAIN_REPORT_CAP {
            *self.listed += 1;
            self.list.push(Disposal {
                session: id,
                node,
                kind,
            });
        } else {
            report.truncated = true;
        }
    }
}

impl Host {
    /// `drain` (X1, H2): see the module documentation. Runs in a `drain` span (`session`: the
    /// roots, comma-separated); counted with its duration in [`crate::HostMetrics`].
    pub async fn drain(&self, roots: Vec<SessionId>) -> Result<DrainReport, HostError> {
        self.drain_with_progress(roots, None).await
    }

    /// [`Host::drain`] that, with `progress`, publishes [`DrainProgress`] messages on
    /// `lineage.<cluster>.drain.<progress>.progress` as it goes (see the module documentation).
    pub async fn drain_with_progress(
        &self,
        roots: Vec<SessionId>,
        progress: Option<DrainId>,
    ) -> Result<DrainReport, HostError> {
        let op = op_span!("drain", self.node());
        op.record("session", join(&roots));
        let started = std::time::Instant::now();
        let report = op
            .run(self.shared.drain(roots, progress, StopReason::Disposed))
            .await;
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.shared.metrics.drained(report.is_ok(), ms);
        report
    }

    /// Per-node `stop` (drain step 4), in a `stop` span.
    pub async fn stop_sessions(&self, request: StopRequest) -> StopReply {
        let op = op_span!("stop", self.node());
        op.record("session", join(&request.sessions));
        op.enter(self.shared.stop_local(request)).await
    }

    /// Per-node `release` (drain waves), in a `release` span.
    pub async fn release_sessions(&self, request: StopRequest) -> StopReply {
        let op = op_span!("release", self.node());
        op.record("session", join(&request.sessions));
        op.enter(self.shared.release_local(request)).await
    }
}

fn join(ids: &[SessionId]) -> String {
    ids.iter()
        .map(SessionId::as_str)
        .collect::<Vec<_>>()
        .join(",")
}
