//! One live agent: a tokio task that executes what its engine decides (X2, M1–M4).
//!
//! The rules are in `lineage_core::engine::AgentEngine`: the task feeds it what happened and
//! executes the commands it returns, in order ([`exec`]). The task owns the I/O: the driver,
//! the in-memory log and its durable cursor, the registry and NATS through `Shared`, the reply
//! channels. A turn runs concurrently with the mailbox ([`turn`]): a followup or inbox message
//! that arrives mid-turn is accepted into the log and answered at once, and the driver's
//! actions during its turn (reply, report, spawn) come back with their outcome.
//!
//! Log events are the core's typed journal (`lineage_core::journal`); the constants below are
//! their kinds, for readers of a log.

mod actions;
mod child_task;
pub(crate) mod cmd;
pub(crate) mod composition;
mod exec;
mod handoff;
pub(crate) mod mail;
mod output;
mod record;
mod supervise;
mod turn;

pub(crate) use cmd::{AgentCmd, HandedOff};
use mail::arrival_of;
pub(crate) use mail::{Delivered, Incoming};

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use lineage_bus::events::LogCursor;
use lineage_bus::trace::TraceContext;
use lineage_core::descriptor::{SubagentDescriptor, SubagentShape};
use lineage_core::engine::restore::fold;
use lineage_core::engine::{AgentEngine, EngineEvent, EngineInit};
use lineage_core::header::{AgentPreset, SessionHeader};
use lineage_core::ids::SessionId;
use lineage_core::log::SessionLog;
use lineage_core::messages::{StopReason, SubagentRunInfo};
use lineage_core::policy::ParentPolicyView;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::control::OneShotResult;
use crate::error::HostError;
use crate::live::AgentHandle;
use crate::shared::Shared;
use lineage_drivers::driver::{AgentDriver, AgentSpec, DriverStart};

pub(crate) use lineage_core::journal::Accepted;

pub use record::{AgentRecord, ACCEPTED_EVENT, AGENT_EVENT};

/// Everything needed to bring an agent to life (at birth or on cold resume).
pub(crate) struct AgentInit {
    pub(crate) header: SessionHeader,
    pub(crate) shape: Option<SubagentShape>,
    pub(crate) descriptor: Option<SubagentDescriptor>,
    pub(crate) spec: AgentSpec,
    pub(crate) policy_view: ParentPolicyView,
    pub(crate) preset: Option<AgentPreset>,
    pub(crate) log: SessionLog,
    pub(crate) cursor: LogCursor,
    /// How many messages hold the log on the bus (what compaction weighs).
    pub(crate) log_messages: u64,
    pub(crate) run: Option<SubagentRunInfo>,
    pub(crate) owner: Option<SessionId>,
    pub(crate) resumed: bool,
    /// Whether the registry lists children of it (a resume): its inbox consumer opens at
    /// once, for children adopted from outside a turn leave no mark in its log.
    pub(crate) has_children: bool,
    pub(crate) one_shot: Option<oneshot::Sender<OneShotResult>>,
    /// The placement epoch this agent holds (1 at birth; the claim's on resume): its registry
    /// state writes are fenced by it (K1).
    pub(crate) epoch: Option<u64>,
    /// A top-level session's idle TTL ([`lineage_core::idle`]), from its agent record.
    pub(crate) idle_ttl: Option<lineage_core::idle::IdleTtl>,
    /// The usage its registry record holds (a resume): where its context and cost stood.
    pub(crate) usage: Option<lineage_core::usage::SessionUsage>,
    /// What wakes it into a turn (a top-level session's choice, from its agent record).
    pub(crate) wake_on: lineage_core::engine::WakeOn,
    /// A root's editor's MCP servers (issue 38): from its birth only, never written down (a
    /// cold resume has none).
    pub(crate) mcp_servers: Vec<lineage_protocol::editor_mcp::PassedMcpServer>,
}

/// Who waits for an engine answer.
pub(crate) enum Pending {
    /// A delivery; `inbox_lag` is set for an inbox message (metrics).
    Deliver {
        reply: oneshot::Sender<Result<Delivered, HostError>>,
        inbox_lag: Option<u64>,
        trace: Option<TraceContext>,
    },
    /// A driver action during a turn.
    Action(oneshot::Sender<lineage_drivers::driver::ActionOutcome>),
}

/// The task state of one live agent: its engine and its I/O.
pub(crate) struct AgentTask {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: SessionId,
    pub(crate) engine: AgentEngine,
    pub(crate) header: SessionHeader,
    pub(crate) shape: Option<SubagentShape>,
    pub(crate) descriptor: Option<SubagentDescriptor>,
    pub(crate) policy_view: ParentPolicyView,
    pub(crate) preset: Option<AgentPreset>,
    /// Taken out while a turn runs (the turn's future owns it).
    pub(crate) driver: Option<Box<dyn AgentDriver>>,
    /// Its files, when it has a workspace: checkpointed at each turn's end (issue 39).
    pub(crate) workspace: Option<TaskWorkspace>,
    pub(crate) log: SessionLog,
    pub(crate) cursor: LogCursor,
    /// How many events at the end of `log` are staged but not yet durable.
    pub(crate) unflushed: usize,
    /// How many messages hold the log on the bus.
    pub(crate) log_messages: u64,
    /// Set while a turn's end is written: its flush may compact the log
    /// ([`lineage_core::log::compaction_due`]).
    pub(crate) turn_ending: bool,
    /// A compaction whose superseded messages are still to be dropped (after the turn's end
    /// is announced).
    pub(crate) superseded: Option<LogCursor>,
    pub(crate) run: Option<SubagentRunInfo>,
    pub(crate) epoch: Option<u64>,
    pub(crate) one_shot: Option<oneshot::Sender<OneShotResult>>,
    /// This session's inbox consumer, not started yet: only its own children write to its
    /// inbox, so it starts with the first child (the stream keeps what came before).
    pub(crate) unopened_inbox: Option<mpsc::UnboundedSender<AgentCmd>>,
    /// Whether the settlement commit also disposed the session (one-shot runs).
    pub(crate) disposed_at_settle: bool,
    pub(crate) turn_slot: Arc<Mutex<Option<CancellationToken>>>,
    /// Shared with its handle: since when nothing happened to it ([`crate::idle`]).
    pub(crate) idle_since_ms: Arc<std::sync::atomic::AtomicU64>,
    pub(crate) stop: CancellationToken,
    pub(crate) done: bool,
    /// A drain released it: it ends for good, and its driver is told ([`AgentDriver::dispose`]).
    pub(crate) released: bool,
    pub(crate) want_turn: bool,
    /// Commands taken off the mailbox and not yet handled (a drain release that arrived during
    /// a turn waits here, with whatever came after it, until the turn is over).
    pub(crate) backlog: VecDeque<AgentCmd>,
    pub(crate) pending: HashMap<u64, Pending>,
    pub(crate) next_reply: u64,
    /// The trace context of the current (or last) turn: what a settlement outside any
    /// operation continues.
    pub(crate) trace: Option<TraceContext>,
    /// Trace contexts of queued waking messages, by log sequence.
    pub(crate) wake_traces: HashMap<u64, TraceContext>,
    /// The agent's name in its turns' `invoke_agent` spans: the profile (or `script`, `acp`).
    pub(crate) agent_name: String,
    /// The latest usage the driver reported in the turn running now (the span's tokens).
    pub(crate) turn_usage: Option<lineage_core::usage::SessionUsage>,
    /// Tokens in its context, as it last reported (shared with its handle, for /metrics).
    pub(crate) context_tokens: Arc<std::sync::atomic::AtomicU64>,
    /// The cumulative cost it last reported (the registry's record at a resume), in
    /// millionths of the currency: what a new report adds to `lineage_agent_cost_total`.
    pub(crate) cost_seen: Option<(String, u64)>,
    /// The seq of the waking message staged last (its trace is recorded when it is answered).
    pub(crate) staged_wake: Option<u64>,
    /// The reply the running turn recorded (for its `turn-end` output).
    pub(crate) turn_reply: Option<String>,
    /// Graceful shutdown: the engine handed the agent off (`pending_work` inside); the
    /// placement is released once the agent is gone.
    pub(crate) handed_off: Option<bool>,
    /// Who waits for the hand-off's outcome.
    pub(crate) handoff_reply: Option<oneshot::Sender<HandedOff>>,
}

/// A session's workspace as its task keeps it (issue 39).
#[derive(Debug, Clone)]
pub(crate) struct TaskWorkspace {
    /// Its own directory of files.
    pub(crate) dir: std::path::PathBuf,
    /// What it may hold (its profile's caps).
    pub(crate) caps: lineage_workspace::Caps,
    /// Checkpoints its log names so far (the next is number `checkpoints + 1`).
    pub(crate) checkpoints: u64,
    /// Its base and latest snapshots as its log names them.
    pub(crate) files: lineage_core::workspace::WorkspaceChanges,
    /// The base's manifest, read at the first checkpoint of this launch.
    pub(crate) manifest: Option<Arc<lineage_workspace::Manifest>>,
}

/// The session's files, when its log names a snapshot: materialized into the driver's own
/// directory before the agent starts (issue 39). A session with a workspace whose agent has no
/// directory of its own is refused.
async fn materialize(
    shared: &Arc<Shared>,
    init: &AgentInit,
    own: Option<lineage_drivers::driver::OwnFiles>,
) -> Result<Option<TaskWorkspace>, HostError> {
    let own_events = init.log.events_after_seed();
    let (Some(files), Some((_, checkpoints))) = (
        lineage_core::workspace::changes(own_events),
        lineage_core::workspace::latest_snapshot(own_events),
    ) else {
        return Ok(None);
    };
    let Some(own) = own else {
        return Err(HostError::BadRequest(format!(
            "session {} has a workspace, but its agent has no directory of its own (a scripted agent, or a profile whose workdir is shared); run it with a profile whose workdir is \"session\"",
            init.header.id()
        )));
    };
    let caps = own.caps;
    shared.materialize(&files, &own.dir, caps).await?;
    Ok(Some(TaskWorkspace {
        dir: own.dir,
        caps,
        checkpoints,
        files,
        manifest: None,
    }))
}

/// Starts the driver, registers the agent, publishes `subagent/start` (a child with a run),
/// and spawns its task and its inbox consumer. Returns once the agent is live: idle, or due to
/// take a turn on the waking messages its log holds unconsumed (the first prompt at birth).
pub(crate) async fn launch(shared: &Arc<Shared>, init: AgentInit) -> Result<(), HostError> {
    shared.lifetime.check_running()?;
    let init_run = init.run.clone();
    let has_children = init.has_children;
    let session = init.header.id().clone();
    if shared.live.is_live(&session) {
        return Err(HostError::Internal(format!(
            "session {session} is already live on node {}",
            shared.node()
        )));
    }
    let mut driver = shared.drivers.make(&init.spec, &session)?;
    let own = driver.own_files();
    let workspace = match materialize(shared, &init, own).await {
        Ok(workspace) => workspace,
        Err(e) => {
            driver.shutdown().await;
            return Err(e);
        }
    };
    driver
        .start(DriverStart {
            session: session.clone(),
            log: init.log.events().to_vec(),
            resumed: init.resumed,
            composition: composition::driver_composition(&init),
        })
        .await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let turn_slot = Arc::new(Mutex::new(None));
    let idle_since_ms = Arc::new(std::sync::atomic::AtomicU64::new(shared.now()));
    let context_tokens = Arc::new(std::sync::atomic::AtomicU64::new(
        init.usage.as_ref().map(|u| u.used_tokens).unwrap_or(0),
    ));
    let stop = shared.lifetime.shutdown.child_token();
    let handle = AgentHandle {
        tx: tx.clone(),
        turn: turn_slot.clone(),
        header: init.header.clone(),
        owner: init.owner.clone(),
        shape: init.shape,
        policy_view: init.policy_view,
        preset: init.preset.clone(),
        tool_filter: init.descriptor.as_ref().and_then(|d| d.tool_filter.clone()),
        stop: stop.clone(),
        workspace: workspace.as_ref().map(|w| (w.dir.clone(), w.caps)),
        idle_ttl: init.idle_ttl,
        idle_since_ms: idle_since_ms.clone(),
        context_tokens: context_tokens.clone(),
    };
    if let Err(e) = shared.live.insert(session.clone(), handle) {
        driver.shutdown().await;
        return Err(e);
    }
    // The driver's own record goes into the log first (made durable below, before anything
    // the restored engine asks for runs), so the engine is restored once, from the whole log.
    let mut log = init.log;
    let start_recorded = match driver.start_record() {
        Some((kind, data)) => {
            log.append(&kind, data, shared.now());
            true
        }
        None => false,
    };
    let descriptor_pending = init.shape == Some(SubagentShape::OneShot)
        && init.descriptor.is_some()
        && log.descriptor_event().is_none();
    let engine_init = EngineInit {
        wake_on: init.wake_on,
        session: session.clone(),
        parent: init.header.parent_session().cloned(),
        shape: init.shape,
        label: init.descriptor.as_ref().and_then(|d| d.label.clone()),
        descriptor_pending,
    };
    let restored = fold(
        engine_init,
        log.events_after_seed(),
        log.last_seq(),
        init.resumed,
        shared.now(),
    );
    let (engine, commands) = match restored {
        Ok(restored) => restored,
        Err(e) => {
            driver.shutdown().await;
            shared.live.remove(&session);
            return Err(e.into());
        }
    };
    let agent_name = lineage_drivers::driver::provider_of(&init.spec);
    let mut task = AgentTask {
        agent_name,
        turn_usage: None,
        context_tokens,
        cost_seen: init
            .usage
            .as_ref()
            .and_then(|u| Some((u.currency.clone()?, u.cost_micros?))),
        shared: shared.clone(),
        session: session.clone(),
        engine,
        header: init.header,
        shape: init.shape,
        descriptor: init.descriptor,
        policy_view: init.policy_view,
        preset: init.preset,
        driver: Some(driver),
        workspace,
        log,
        cursor: init.cursor,
        unflushed: usize::from(start_recorded),
        log_messages: init.log_messages,
        turn_ending: false,
        superseded: None,
        run: init.run,
        epoch: init.epoch,
        one_shot: init.one_shot,
        // Opened at the first child (issue 12: a leaf never has a durable consumer).
        unopened_inbox: Some(tx.clone()),
        disposed_at_settle: false,
        turn_slot,
        idle_since_ms,
        stop: stop.clone(),
        done: false,
        released: false,
        want_turn: false,
        backlog: VecDeque::new(),
        pending: HashMap::new(),
        next_reply: 0,
        trace: lineage_bus::trace::current(),
        wake_traces: HashMap::new(),
        staged_wake: None,
        turn_reply: None,
        handed_off: None,
        handoff_reply: None,
    };
    // Born or resumed while the host winds down: no turn here (the next host takes it).
    if shared.lifetime.winding_down() {
        let quiesce = task.engine.handle(EngineEvent::Quiesce, shared.now());
        task.exec(quiesce).await;
    }
    if start_recorded {
        if let Err(e) = task.flush().await {
            task.abandon_launch().await;
            return Err(e);
        }
    }
    task.exec(commands).await;
    // A restored waking message (at birth: the first prompt, accepted with the creation
    // window) starts its turn in the trace of whoever brought the agent to life.
    if let (Some(ctx), Some(seq)) = (task.trace, task.engine.next_wake_seq()) {
        task.wake_traces.insert(seq, ctx);
    }
    // E1: the child is ready; announced before its task can take a turn (and so settle).
    if let Some(info) = &init_run {
        if let Err(e) = shared
            .bus
            .lifecycle
            .publish(&lineage_core::messages::LifecycleEvent::Start(info.clone()))
            .await
        {
            tracing::warn!(%session, error = %e, "cannot publish subagent/start");
        }
    }
    // Only a session with children gets messages in its inbox (their reports and settlement
    // notices): one restored with children reads it from the start, any other opens it at its
    // first child (a birth from its turn, or one adopted), so a leaf leaves no durable consumer
    // behind (issue 12: one per settled continuable child piled up).
    if has_children || !task.engine.children().is_empty() {
        task.open_inbox();
    }
    drop(tx);
    let join = tokio::spawn(supervise::supervised(
        shared.clone(),
        session.clone(),
        task.run(rx),
    ));
    if let Ok(mut tasks) = shared.lifetime.tasks.lock() {
        tasks.retain(|t| !t.is_finished());
        tasks.push(join);
    }
    Ok(())
}

impl AgentTask {
    /// A launch that failed after the handle was registered: undo it.
    async fn abandon_launch(&mut self) {
        if let Some(mut driver) = self.driver.take() {
            driver.shutdown().await;
        }
        self.shared.live.remove(&self.session);
    }

    /// The task's main loop.
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<AgentCmd>) {
        loop {
            if self.done {
                break;
            }
            if self.want_turn {
                self.want_turn = false;
                // A turn due before the host wound down is not begun (the next host takes it).
                if !self.engine.quiesced() {
                    self.take_turn(&mut rx).await;
                }
                continue;
            }
            let cmd = match self.backlog.pop_front() {
                Some(cmd) => Some(cmd),
                None => tokio::select! {
                    cmd = rx.recv() => cmd,
                    _ = self.stop.cancelled() => None,
                },
            };
            let Some(cmd) = cmd else { break };
            self.handle(cmd).await;
        }
        self.leave().await;
        self.finish_handoff().await;
    }

    /// The agent is gone: write what is staged, stop the driver, answer whoever still waits.
    async fn leave(&mut self) {
        if let Err(e) = self.flush().await {
            tracing::debug!(session = %self.session, error = %e, "staged events not recorded at stop");
        }
        if let Some(mut driver) = self.driver.take() {
            if self.released {
                driver.dispose().await;
            }
            driver.shutdown().await;
        }
        self.stop.cancel();
        self.shared.live.remove(&self.session);
        // Commands left in the backlog: the agent is gone, which is what a stop or release
        // asked for; a message was not accepted (its sender resumes the session or retries).
        for cmd in std::mem::take(&mut self.backlog) {
            match cmd {
                AgentCmd::Deliver { reply, .. } => {
                    let _ = reply.send(Err(self.shared.live.not_live(&self.session)));
                }
                AgentCmd::Stop { reply, .. } | AgentCmd::Release { reply, .. } => {
                    let _ = reply.send(());
                }
                AgentCmd::HandOff(reply) => {
                    let _ = reply.send(HandedOff::Gone);
                }
                AgentCmd::Adopt(_)
                | AgentCmd::OpenInbox
                | AgentCmd::Recover
                | AgentCmd::Quiesce => {}
            }
        }
        for (_, pending) in std::mem::take(&mut self.pending) {
            match pending {
                Pending::Deliver { reply, .. } => {
                    let _ = reply.send(Err(self.shared.live.not_live(&self.session)));
                }
                Pending::Action(reply) => {
                    let _ = reply.send(lineage_drivers::driver::ActionOutcome::Refused(format!(
                        "session {} has stopped",
                        self.session
                    )));
                }
            }
        }
        // A one-shot caller waiting for a result that never came gets a disposed result.
        if let Some(tx) = self.one_shot.take() {
            let _ = tx.send(OneShotResult {
                output: self.engine.last_assistant().map(str::to_owned),
                structured: None,
                stop_reason: StopReason::Disposed,
                changes: self.engine.workspace_changes().cloned().map(Box::new),
            });
        }
    }

    /// Handles one command, with the sender's trace context current.
    async fn handle(&mut self, cmd: AgentCmd) {
        let trace = match &cmd {
            AgentCmd::Deliver { trace, .. }
            | AgentCmd::Stop { trace, .. }
            | AgentCmd::Release { trace, .. } => *trace,
            AgentCmd::Adopt(_)
            | AgentCmd::OpenInbox
            | AgentCmd::Recover
            | AgentCmd::Quiesce
            | AgentCmd::HandOff(_) => None,
        };
        lineage_bus::trace::maybe_scope(trace, self.handle_cmd(cmd)).await
    }

    /// One command of the mailbox, in its sender's trace.
    async fn handle_cmd(&mut self, cmd: AgentCmd) {
        match cmd {
            AgentCmd::Deliver {
                incoming,
                reply,
                trace,
            } => self.deliver(incoming, reply, trace).await,
            AgentCmd::Adopt(child) => {
                self.open_inbox();
                self.feed(EngineEvent::Adopt(child)).await
            }
            AgentCmd::OpenInbox => self.open_inbox(),
            AgentCmd::Recover => self.feed(EngineEvent::Recover).await,
            AgentCmd::Quiesce => self.feed(EngineEvent::Quiesce).await,
            AgentCmd::HandOff(reply) => self.hand_off(reply).await,
            AgentCmd::Stop { reason, reply, .. } => {
                self.cancel_turn();
                self.feed(EngineEvent::Stop(reason)).await;
                let _ = reply.send(());
            }
            AgentCmd::Release { reason, reply, .. } => {
                self.cancel_turn();
                self.feed(EngineEvent::Release(reason)).await;
                self.done = true;
                self.released = true;
                let _ = reply.send(());
            }
        }
    }

    /// Hands a message to the engine (log first, answer when durable).
    async fn deliver(
        &mut self,
        incoming: Incoming,
        reply: oneshot::Sender<Result<Delivered, HostError>>,
        trace: Option<TraceContext>,
    ) {
        let (arrival, inbox_lag) = arrival_of(incoming, self.shared.now());
        let id = self.reply_id(Pending::Deliver {
            reply,
            inbox_lag,
            trace,
        });
        self.feed(EngineEvent::Deliver { arrival, reply: id }).await;
    }

    /// Feeds the engine and executes what it returns.
    pub(crate) async fn feed(&mut self, event: EngineEvent) {
        let commands = self.engine.handle(event, self.shared.now());
        self.exec(commands).await;
    }

    pub(crate) fn reply_id(&mut self, pending: Pending) -> u64 {
        self.next_reply += 1;
        self.pending.insert(self.next_reply, pending);
        self.next_reply
    }

    pub(crate) fn cancel_turn(&self) {
        if let Ok(slot) = self.turn_slot.lock() {
            if let Some(token) = slot.as_ref() {
                token.cancel();
            }
        }
    }

    /// Starts this session's inbox consumer if it has not started yet (at its first child).
    pub(crate) fn open_inbox(&mut self) {
        if let Some(tx) = self.unopened_inbox.take() {
            crate::report::spawn_inbox_consumer(
                &self.shared,
                self.session.clone(),
                tx,
                self.stop.clone(),
            );
        }
    }
}
