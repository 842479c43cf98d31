//! One live agent: a tokio task owning its driver, its log, its activation and its queues.
//!
//! The task runs turns one at a time. Between turns it takes [`AgentCmd`]s from its mailbox:
//! messages (followups and inbox deliveries, accepted into the log before they are
//! acknowledged), adoption of a child spawned on its behalf, drain stop and release. What
//! arrived during a turn is taken as soon as the turn ends, before the activation decides
//! between another turn, waiting and settling: a followup sent mid-turn is the next turn, not
//! a settlement and a cold resume. An interrupt does not wait for the mailbox: it cancels the
//! turn's token directly ([`crate::interrupt`]); a drain queues its stop before cancelling, so
//! the child settles as `disposed`.
//!
//! Continuable and one-shot children are driven by a `lineage_core::activation::Activation`
//! (the core decides when to take a turn, wait or settle; this task executes its actions). A
//! top-level session has no activation: it takes a turn per waking message and never settles;
//! only a drain ends it.
//!
//! Log events the host writes (besides the core's `subagent/descriptor`, `sandbox/mode`,
//! `approval/policy`):
//!
//! | kind | data |
//! |---|---|
//! | `host/agent` | `{agent, policy_view}`: what to run on cold resume |
//! | `inbox/accepted` | `{message, wake, dedup_id}`: a message durably accepted (M1, M2, M3) |
//! | `turn/start` | `{index, inputs: [log seq]}`: the messages a turn consumed |
//! | `turn/user` | `{text}`: each of those messages as text (the transcript) |
//! | `turn/assistant` | `{text}` |
//! | `turn/end` | `{index, stop_reason, error?}` |
//! | `outbox/report` | `{seq, content, delivery}` (M1) |
//! | `outbox/settled` | `{seq, stop_reason, summary}` (M2) |
//! | `subagent/spawned` | `{child, shape, node, run}` |
//! | `subagent/result` | `{child, result}`: a one-shot child's result |
//! | `subagent/spawn-refused` | `{error}`: a refused spawn, as feedback for the agent |

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use lineage_bus::events::LogCursor;
use lineage_bus::trace::TraceContext;
use lineage_core::activation::{Activation, ActivationAction, ActivationEvent};
use lineage_core::descriptor::{
    append_descriptor_at_first_pre_step, SubagentDescriptor, SubagentShape,
};
use lineage_core::header::{AgentPreset, SessionHeader};
use lineage_core::ids::SessionId;
use lineage_core::log::SessionLog;
use lineage_core::messages::{InboxMessage, StopReason, SubagentRunInfo};
use lineage_core::policy::ParentPolicyView;
use lineage_registry::types::SessionState;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::control::OneShotResult;
use crate::driver::{AgentDriver, AgentSpec, DriverAction, DriverStart, TurnInput, TurnMessage};
use crate::error::HostError;
use crate::host::{AgentHandle, Shared};
use crate::telemetry::op_span;

/// Log event: what to run on cold resume.
pub const AGENT_EVENT: &str = "host/agent";
/// Log event: a message durably accepted.
pub const ACCEPTED_EVENT: &str = "inbox/accepted";
/// Log event: a turn started.
pub const TURN_START_EVENT: &str = "turn/start";
/// Log event: one input message of a turn, rendered as text (the transcript).
pub const USER_EVENT: &str = "turn/user";
/// Log event: an assistant reply.
pub const ASSISTANT_EVENT: &str = "turn/assistant";
/// Log event: a turn ended.
pub const TURN_END_EVENT: &str = "turn/end";
/// Log event: a report sent to the parent.
pub const REPORT_SENT_EVENT: &str = "outbox/report";
/// Log event: the settlement notice sent to the parent.
pub const SETTLED_SENT_EVENT: &str = "outbox/settled";
/// Log event: a child was spawned.
pub const SPAWNED_EVENT: &str = "subagent/spawned";
/// Log event: a one-shot child's result.
pub const RESULT_EVENT: &str = "subagent/result";
/// Log event: a spawn was refused.
pub const SPAWN_REFUSED_EVENT: &str = "subagent/spawn-refused";

/// Data of a `host/agent` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// The agent to run.
    pub agent: AgentSpec,
    /// The session's own policy view (what its children inherit).
    #[serde(default)]
    pub policy_view: ParentPolicyView,
}

/// Data of an `inbox/accepted` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Accepted {
    pub(crate) message: TurnMessage,
    pub(crate) wake: bool,
    #[serde(default)]
    pub(crate) dedup_id: Option<String>,
}

/// What comes into an agent.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A user message (followup, first prompt).
    User(String),
    /// A child's report or settlement from the durable inbox.
    Inbox(InboxMessage),
}

/// A command to a live agent.
pub(crate) enum AgentCmd {
    /// Accept a message into the log; the reply says it is durable (then the inbox acks it).
    /// `trace` is the context of the operation that delivers it; the turn it wakes joins it.
    Deliver {
        incoming: Incoming,
        reply: oneshot::Sender<Result<(), HostError>>,
        trace: Option<TraceContext>,
    },
    /// Adopt a child spawned on this agent's behalf (not from its own turn).
    Adopt(SessionId),
    /// Drain step 2: take no more turns.
    Stop {
        reply: oneshot::Sender<()>,
        trace: Option<TraceContext>,
    },
    /// Drain wave: settle (stop reason `disposed`) and leave.
    Release {
        reply: oneshot::Sender<()>,
        trace: Option<TraceContext>,
    },
    /// Re-adoption at start-up (see `readopt`): with no turn to take, let the activation
    /// decide as if the last turn had just finished (it settles when nothing is pending and no
    /// owned child remains, else it waits).
    Recover,
}

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
    pub(crate) run: Option<SubagentRunInfo>,
    pub(crate) owner: Option<SessionId>,
    pub(crate) resumed: bool,
    pub(crate) one_shot: Option<oneshot::Sender<OneShotResult>>,
    /// The placement epoch this agent holds (1 at birth; the claim's on resume): its registry
    /// state writes are fenced by it (K1).
    pub(crate) epoch: Option<u64>,
}

/// The task state of one live agent.
pub(crate) struct AgentTask {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: SessionId,
    pub(crate) header: SessionHeader,
    pub(crate) shape: Option<SubagentShape>,
    pub(crate) descriptor: Option<SubagentDescriptor>,
    pub(crate) policy_view: ParentPolicyView,
    pub(crate) preset: Option<AgentPreset>,
    pub(crate) driver: Box<dyn AgentDriver>,
    pub(crate) log: SessionLog,
    pub(crate) cursor: LogCursor,
    /// How many events at the end of `log` are staged but not yet durable (see
    /// [`AgentTask::stage`]).
    pub(crate) unflushed: usize,
    pub(crate) activation: Option<Activation>,
    pub(crate) wake: VecDeque<(u64, TurnMessage)>,
    pub(crate) quiet: Vec<(u64, TurnMessage)>,
    pub(crate) busy: bool,
    pub(crate) want_turn: bool,
    pub(crate) turn_index: u64,
    pub(crate) outbox_seq: u64,
    pub(crate) accepted: HashSet<String>,
    pub(crate) run: Option<SubagentRunInfo>,
    pub(crate) last_assistant: Option<String>,
    pub(crate) last_stop: StopReason,
    pub(crate) forced_stop: Option<StopReason>,
    pub(crate) captured: Option<OneShotResult>,
    /// The settlement notice captured for delivery after the commit (continuable children).
    pub(crate) notice: Option<lineage_core::messages::SubagentSettled>,
    /// A one-shot run's inbox consumer, not started yet: only its own children can write to
    /// its inbox, so it starts with the first spawn (the stream keeps what came before).
    pub(crate) unopened_inbox: Option<mpsc::UnboundedSender<AgentCmd>>,
    /// The placement epoch this agent holds (see [`AgentInit::epoch`]).
    pub(crate) epoch: Option<u64>,
    /// Whether the settlement commit also disposed the session (one-shot runs).
    pub(crate) disposed_at_settle: bool,
    pub(crate) one_shot: Option<oneshot::Sender<OneShotResult>>,
    pub(crate) turn_slot: Arc<Mutex<Option<CancellationToken>>>,
    pub(crate) stop: CancellationToken,
    pub(crate) done: bool,
    pub(crate) recorded_waiting: bool,
    /// Commands taken off the mailbox at the end of a turn and not yet handled (a drain stop or
    /// release waits here, in order, behind the messages that arrived before it).
    pub(crate) backlog: VecDeque<AgentCmd>,
    /// The trace context of the current (or last) turn: what a settlement outside any
    /// operation continues.
    pub(crate) trace: Option<TraceContext>,
    /// Trace contexts of queued waking messages, by log sequence: the turn a message wakes
    /// joins its sender's trace.
    pub(crate) wake_traces: HashMap<u64, TraceContext>,
}

/// One input message as transcript text.
pub(crate) fn render(message: &TurnMessage) -> String {
    match message {
        TurnMessage::User { content } => content.clone(),
        TurnMessage::SubagentReport {
            sender_session_id,
            content,
        } => format!("report from {sender_session_id}: {content}"),
        TurnMessage::SubagentSettled {
            sender_session_id,
            summary,
        } => format!("settled {sender_session_id}: {summary}"),
    }
}

/// Parses a stop reason written by [`StopReason::as_str`].
pub(crate) fn parse_stop_reason(text: Option<&str>) -> StopReason {
    match text {
        Some("failed") => StopReason::Failed,
        Some("interrupted") => StopReason::Interrupted,
        Some("disposed") => StopReason::Disposed,
        Some("max_turns") => StopReason::MaxTurns,
        Some(_) | None => StopReason::Completed,
    }
}

/// Starts the driver, registers the agent, publishes `subagent/start` (a child with a run),
/// and spawns its task and its inbox consumer. Returns once the agent is live: idle, or taking
/// a turn on the waking messages its log holds unconsumed (the first prompt at birth).
pub(crate) async fn launch(shared: &Arc<Shared>, init: AgentInit) -> Result<(), HostError> {
    shared.check_running()?;
    let init_run = init.run.clone();
    let session = init.header.id().clone();
    if shared.is_live(&session) {
        return Err(HostError::Internal(format!(
            "session {session} is already live on node {}",
            shared.node()
        )));
    }
    let mut driver = shared.drivers.make(&init.spec, &session)?;
    driver
        .start(DriverStart {
            session: session.clone(),
            log: init.log.events().to_vec(),
            resumed: init.resumed,
        })
        .await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let turn_slot = Arc::new(Mutex::new(None));
    let stop = shared.shutdown.child_token();
    let handle = AgentHandle {
        tx: tx.clone(),
        turn: turn_slot.clone(),
        header: init.header.clone(),
        owner: init.owner.clone(),
        shape: init.shape,
        policy_view: init.policy_view,
        preset: init.preset.clone(),
    };
    if let Err(e) = shared.insert(session.clone(), handle) {
        driver.shutdown().await;
        return Err(e);
    }
    let activation = match (init.shape, init.header.parent_session()) {
        (Some(_), Some(parent)) => Some(Activation::new(session.clone(), parent.clone())),
        (Some(_), None) | (None, _) => None,
    };
    let mut task = AgentTask {
        shared: shared.clone(),
        session: session.clone(),
        header: init.header,
        shape: init.shape,
        descriptor: init.descriptor,
        policy_view: init.policy_view,
        preset: init.preset,
        driver,
        log: init.log,
        cursor: init.cursor,
        unflushed: 0,
        activation,
        wake: VecDeque::new(),
        quiet: Vec::new(),
        busy: false,
        want_turn: false,
        turn_index: 0,
        outbox_seq: 0,
        accepted: HashSet::new(),
        run: init.run.clone(),
        last_assistant: None,
        last_stop: StopReason::Completed,
        forced_stop: None,
        captured: None,
        one_shot: init.one_shot,
        epoch: init.epoch,
        disposed_at_settle: false,
        unopened_inbox: match init.shape {
            Some(SubagentShape::OneShot) => Some(tx.clone()),
            Some(SubagentShape::Continuable) | None => None,
        },
        notice: None,
        turn_slot,
        stop: stop.clone(),
        done: false,
        recorded_waiting: false,
        backlog: VecDeque::new(),
        trace: lineage_bus::trace::current(),
        wake_traces: HashMap::new(),
    };
    if let Some((kind, data)) = task.driver.start_record() {
        task.append(&kind, data).await?;
    }
    if init.resumed {
        task.close_interrupted_turn().await?;
    }
    let pending = task.restore_from_log();
    // A restored waking message (at birth: the first prompt, accepted with the creation
    // window) starts its turn in the trace of whoever brought the agent to life.
    if let Some(ctx) = task.trace {
        let seqs: Vec<u64> = task.wake.iter().map(|(seq, _)| *seq).collect();
        for seq in seqs {
            task.wake_traces.insert(seq, ctx);
        }
    }
    for wake in pending {
        if wake {
            task.queued().await;
        }
    }
    // E1: the child is ready; announced before its task can take a turn (and so settle).
    if let Some(info) = &init_run {
        if let Err(e) = shared
            .lifecycle
            .publish(&lineage_core::messages::LifecycleEvent::Start(info.clone()))
            .await
        {
            tracing::warn!(%session, error = %e, "cannot publish subagent/start");
        }
    }
    if task.unopened_inbox.is_none() {
        crate::report::spawn_inbox_consumer(shared, session.clone(), tx, stop.clone());
    }
    let join = tokio::spawn(task.run(rx));
    if let Ok(mut tasks) = shared.tasks.lock() {
        tasks.retain(|t| !t.is_finished());
        tasks.push(join);
    }
    Ok(())
}

impl AgentTask {
    /// On resume: a turn the log shows started but never ended was cut short by the loss of
    /// the agent that ran it (its node died or restarted). It gets its `turn/end`, stop reason
    /// `interrupted`, before anything else happens, so the log says how it ended.
    async fn close_interrupted_turn(&mut self) -> Result<(), HostError> {
        let Some(last) = self
            .log
            .events_after_seed()
            .iter()
            .rev()
            .find(|e| e.kind == TURN_START_EVENT || e.kind == TURN_END_EVENT)
        else {
            return Ok(());
        };
        if last.kind != TURN_START_EVENT {
            return Ok(());
        }
        let index = last.data.get("index").cloned().unwrap_or(json!(null));
        self.append(
            TURN_END_EVENT,
            json!({
                "index": index,
                "stop_reason": StopReason::Interrupted.as_str(),
                "error": "the agent running this turn was lost (its node stopped); resumed here",
            }),
        )
        .await?;
        self.last_stop = StopReason::Interrupted;
        Ok(())
    }

    /// [`AgentCmd::Recover`]: nothing to do while a turn runs or is due (it reaches the
    /// activation when it ends); otherwise the activation hears that the last turn finished,
    /// with that turn's stop reason.
    async fn recover(&mut self) {
        if self.busy || self.want_turn || !self.wake.is_empty() || self.activation.is_none() {
            return;
        }
        let last_stop = self
            .log
            .events_after_seed()
            .iter()
            .rev()
            .find(|e| e.kind == TURN_END_EVENT)
            .and_then(|e| e.data.get("stop_reason").and_then(|v| v.as_str()))
            .map(str::to_owned);
        match last_stop {
            Some(stop) => {
                self.feed(ActivationEvent::TurnFinished {
                    stop_reason: Some(stop),
                })
                .await
            }
            None => self.feed(ActivationEvent::Idle).await,
        }
    }

    /// Rebuilds counters, dedup ids and unconsumed messages from the log (cold resume; a no-op
    /// at birth). Returns one `wake` flag per restored pending message.
    fn restore_from_log(&mut self) -> Vec<bool> {
        let mut consumed: BTreeSet<u64> = BTreeSet::new();
        let mut accepted: Vec<(u64, Accepted)> = Vec::new();
        for event in self.log.events_after_seed() {
            match event.kind.as_str() {
                TURN_START_EVENT => {
                    self.turn_index += 1;
                    if let Some(inputs) = event.data.get("inputs").and_then(|v| v.as_array()) {
                        consumed.extend(inputs.iter().filter_map(serde_json::Value::as_u64));
                    }
                }
                ACCEPTED_EVENT => {
                    if let Ok(a) = serde_json::from_value::<Accepted>(event.data.clone()) {
                        if let Some(id) = &a.dedup_id {
                            self.accepted.insert(id.clone());
                        }
                        accepted.push((event.seq, a));
                    }
                }
                REPORT_SENT_EVENT | SETTLED_SENT_EVENT => {
                    let seq = event.data.get("seq").and_then(serde_json::Value::as_u64);
                    self.outbox_seq = self.outbox_seq.max(seq.unwrap_or(0));
                }
                ASSISTANT_EVENT => {
                    self.last_assistant = event
                        .data
                        .get("text")
                        .and_then(serde_json::Value::as_str)
                        .map(str::to_owned);
                }
                _ => {}
            }
        }
        let mut flags = Vec::new();
        for (seq, a) in accepted {
            if consumed.contains(&seq) {
                continue;
            }
            flags.push(a.wake);
            if a.wake {
                self.wake.push_back((seq, a.message));
            } else {
                self.quiet.push((seq, a.message));
            }
        }
        flags
    }

    /// Appends one event to the durable log, together with every staged one (one message,
    /// one round trip): a barrier, used before anything outside the task can see the event's
    /// effect (an inbox ack, a report or settlement publish). Optimistic: a conflict means
    /// another node owns the session now, and this agent stops. On failure the event is taken
    /// back out of the in-memory log (the staged ones stay staged for the next flush).
    pub(crate) async fn append(
        &mut self,
        kind: &str,
        data: serde_json::Value,
    ) -> Result<u64, HostError> {
        let seq = self.stage(kind, data);
        if let Err(e) = self.flush().await {
            self.unflushed -= 1;
            self.truncate_log(self.log.len() - 1);
            return Err(e);
        }
        Ok(seq)
    }

    /// Adds one event to the in-memory log only; it becomes durable with the next
    /// [`AgentTask::flush`] (or barrier [`AgentTask::append`]). Used for what a turn records
    /// between its barriers (turn start, transcript, a one-shot run's replies and spawns, turn
    /// end): a crash before the flush loses them together. A resumable session flushes its turn
    /// start before the driver runs, so what a crash can lose there is the end of a turn, which
    /// a resume closes as `interrupted`.
    pub(crate) fn stage(&mut self, kind: &str, data: serde_json::Value) -> u64 {
        let now = self.shared.now();
        self.unflushed += 1;
        self.log.append(kind, data, now).seq
    }

    /// Records what a turn did: durable at once (a barrier append) for a resumable session,
    /// whose log is what a cold resume continues from and what an operator reads while the
    /// turn runs; staged for a one-shot run, which is never resumed (its log is written as
    /// one message at the end of its turn). A staged event cannot fail here.
    pub(crate) async fn record(
        &mut self,
        kind: &str,
        data: serde_json::Value,
    ) -> Result<u64, HostError> {
        match self.shape {
            Some(SubagentShape::OneShot) => Ok(self.stage(kind, data)),
            Some(SubagentShape::Continuable) | None => self.append(kind, data).await,
        }
    }

    /// Makes every staged event durable, as one message. Optimistic like [`AgentTask::append`];
    /// on failure the staged events stay staged.
    pub(crate) async fn flush(&mut self) -> Result<(), HostError> {
        if self.unflushed == 0 {
            return Ok(());
        }
        let events = self.log.events();
        let staged = &events[events.len().saturating_sub(self.unflushed)..];
        match self
            .shared
            .events
            .append_all(&self.session, staged, Some(self.cursor))
            .await
        {
            Ok(cursor) => {
                self.cursor = cursor;
                self.unflushed = 0;
                Ok(())
            }
            Err(e) => {
                if matches!(e, lineage_bus::BusError::LogConflict { .. }) {
                    tracing::warn!(session = %self.session, "log fenced by another node; stopping");
                    self.done = true;
                }
                Err(e.into())
            }
        }
    }

    /// Keeps the first `len` events of the in-memory log (in step with the durable one).
    fn truncate_log(&mut self, len: usize) {
        let mut events = self.log.events().to_vec();
        events.truncate(len);
        if let Ok(log) =
            SessionLog::from_events(self.session.clone(), events, self.log.seed_length())
        {
            self.log = log;
        }
    }

    /// Starts a one-shot run's inbox consumer if it has not started yet (see `unopened_inbox`).
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

    /// A waking message was queued: tell the activation (or, top level, start a turn if idle).
    async fn queued(&mut self) {
        match self.activation.as_mut() {
            Some(act) => match act.handle(ActivationEvent::MessageQueued) {
                Ok(actions) => self.execute(actions).await,
                Err(e) => tracing::warn!(session = %self.session, error = %e, "message refused"),
            },
            None => {
                if !self.busy {
                    self.busy = true;
                    self.want_turn = true;
                }
            }
        }
    }

    /// Feeds the activation and executes what it returns.
    pub(crate) async fn feed(&mut self, event: ActivationEvent) {
        let Some(act) = self.activation.as_mut() else {
            return;
        };
        match act.handle(event) {
            Ok(actions) => self.execute(actions).await,
            Err(e) => {
                tracing::warn!(session = %self.session, error = %e, "activation refused an event")
            }
        }
    }

    /// Executes activation actions in order (X2). A settlement (the actions from capture to
    /// delivery) runs in a `settle` span, continuing the current operation or the last turn.
    pub(crate) fn execute(
        &mut self,
        actions: Vec<ActivationAction>,
    ) -> crate::driver::BoxFuture<'_, ()> {
        Box::pin(async move {
            let settles = actions
                .iter()
                .any(|a| matches!(a, ActivationAction::MarkTerminal));
            if !settles {
                return self.execute_actions(actions).await;
            }
            let parent = lineage_bus::trace::current().or(self.trace);
            let op = op_span!("settle", self.shared.node(), parent);
            op.record("session", &self.session)
                .record_opt("parent", self.header.parent_session())
                .record_opt("run", self.run.as_ref().map(|r| &r.run_id))
                .record_opt("shape", self.shape.map(|s| s.as_str()));
            op.enter(self.execute_actions(actions)).await;
            if let Some(c) = &self.captured {
                op.record("stop_reason", c.stop_reason.as_str());
            }
        })
    }

    fn execute_actions(
        &mut self,
        actions: Vec<ActivationAction>,
    ) -> crate::driver::BoxFuture<'_, ()> {
        Box::pin(async move {
            for action in actions {
                match action {
                    ActivationAction::StartTurn => {
                        if self.recorded_waiting {
                            self.recorded_waiting = false;
                            let _ = self
                                .shared
                                .set_state(&self.session, SessionState::Running, self.epoch)
                                .await;
                        }
                        self.want_turn = true;
                    }
                    ActivationAction::CancelTurn => self.cancel_turn(),
                    ActivationAction::EnterWaiting => {
                        self.recorded_waiting = true;
                        if let Err(e) = self
                            .shared
                            .set_state(&self.session, SessionState::Waiting, self.epoch)
                            .await
                        {
                            tracing::warn!(session = %self.session, error = %e, "cannot record waiting");
                        }
                    }
                    ActivationAction::CaptureResult { stop_reason } => {
                        self.capture(stop_reason.as_deref());
                    }
                    ActivationAction::MarkTerminal => {
                        if let Err(e) = self.mark_terminal().await {
                            // Never notify before the commit: stop here, resumable later.
                            tracing::error!(session = %self.session, error = %e, "settlement not committed; not notifying");
                            self.done = true;
                            return;
                        }
                    }
                    ActivationAction::DisposeHandle => self.done = true,
                    ActivationAction::SettleObservers => self.settle_observers().await,
                    ActivationAction::DeliverSettlement {
                        parent_session,
                        child,
                    } => self.deliver_settlement(parent_session, child).await,
                }
            }
        })
    }

    pub(crate) fn cancel_turn(&self) {
        if let Ok(slot) = self.turn_slot.lock() {
            if let Some(token) = slot.as_ref() {
                token.cancel();
            }
        }
    }

    /// The task's main loop.
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<AgentCmd>) {
        loop {
            if self.done {
                break;
            }
            if self.want_turn {
                self.want_turn = false;
                self.take_turn(&mut rx).await;
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
        if let Err(e) = self.flush().await {
            tracing::debug!(session = %self.session, error = %e, "staged events not recorded at stop");
        }
        self.driver.shutdown().await;
        self.stop.cancel();
        self.shared.remove(&self.session);
        // Commands left in the backlog: the agent is gone, which is what a stop or release
        // asked for; a message was not accepted (its sender resumes the session or retries).
        for cmd in std::mem::take(&mut self.backlog) {
            match cmd {
                AgentCmd::Deliver { reply, .. } => {
                    let _ = reply.send(Err(self.shared.not_live(&self.session)));
                }
                AgentCmd::Stop { reply, .. } | AgentCmd::Release { reply, .. } => {
                    let _ = reply.send(());
                }
                AgentCmd::Adopt(_) | AgentCmd::Recover => {}
            }
        }
        // A one-shot caller waiting for a result that never came gets a disposed result.
        if let Some(tx) = self.one_shot.take() {
            let _ = tx.send(self.captured.clone().unwrap_or(OneShotResult {
                output: self.last_assistant.clone(),
                structured: None,
                stop_reason: StopReason::Disposed,
            }));
        }
    }

    /// Handles one command, with the sender's trace context current.
    async fn handle(&mut self, cmd: AgentCmd) {
        let trace = match &cmd {
            AgentCmd::Deliver { trace, .. }
            | AgentCmd::Stop { trace, .. }
            | AgentCmd::Release { trace, .. } => *trace,
            AgentCmd::Adopt(_) | AgentCmd::Recover => None,
        };
        lineage_bus::trace::maybe_scope(trace, self.handle_inner(cmd)).await
    }

    async fn handle_inner(&mut self, cmd: AgentCmd) {
        match cmd {
            AgentCmd::Deliver {
                incoming,
                reply,
                trace,
            } => {
                let outcome = self.accept(incoming, trace).await;
                let _ = reply.send(outcome);
            }
            AgentCmd::Adopt(child) => self.feed(ActivationEvent::ChildAdopted(child)).await,
            AgentCmd::Recover => self.recover().await,
            AgentCmd::Stop { reply, .. } => {
                self.cancel_turn();
                self.forced_stop = Some(StopReason::Disposed);
                if self.activation.is_some() {
                    self.feed(ActivationEvent::Stop).await;
                }
                let _ = reply.send(());
            }
            AgentCmd::Release { reply, .. } => {
                self.cancel_turn();
                self.forced_stop = Some(StopReason::Disposed);
                if self.activation.is_some() {
                    self.feed(ActivationEvent::Stop).await;
                    // Leaves first: every owned child is gone by the time its parent's wave runs.
                    let owned: Vec<SessionId> = self
                        .activation
                        .as_ref()
                        .map(|a| a.owned_children().iter().cloned().collect())
                        .unwrap_or_default();
                    for child in owned {
                        self.feed(ActivationEvent::ChildDisposed(child)).await;
                    }
                }
                self.done = true;
                let _ = reply.send(());
            }
        }
    }

    /// Accepts a message durably (log first), queues it for a turn, and tells the activation.
    async fn accept(
        &mut self,
        incoming: Incoming,
        trace: Option<TraceContext>,
    ) -> Result<(), HostError> {
        let mut inbox_lag = None;
        let (message, wake, dedup_id, settled_child) = match incoming {
            Incoming::User(content) => (TurnMessage::User { content }, true, None, None),
            Incoming::Inbox(msg) => {
                let dedup = msg.dedup_id();
                if self.accepted.contains(&dedup) {
                    self.shared.metrics.inbox_duplicate();
                    return Ok(()); // already in the log: ack and skip (exactly once)
                }
                inbox_lag = Some(self.shared.now().saturating_sub(msg.at_ms()));
                match msg {
                    InboxMessage::Report(r) => (
                        TurnMessage::SubagentReport {
                            sender_session_id: r.sender_session_id,
                            content: r.content,
                        },
                        matches!(r.delivery, lineage_core::messages::Delivery::Wakeup),
                        Some(dedup),
                        None,
                    ),
                    InboxMessage::Settled(s) => (
                        TurnMessage::SubagentSettled {
                            sender_session_id: s.sender_session_id.clone(),
                            summary: s.summary.as_str().to_owned(),
                        },
                        true,
                        Some(dedup),
                        Some(s.sender_session_id),
                    ),
                }
            }
        };
        if let Some(act) = &self.activation {
            if act.state() == lineage_core::activation::ActivationState::Settled {
                return Err(HostError::NotLive {
                    session: self.session.to_string(),
                    node: self.shared.node().to_string(),
                });
            }
        }
        let record = Accepted {
            message: message.clone(),
            wake,
            dedup_id: dedup_id.clone(),
        };
        let data = serde_json::to_value(&record)
            .map_err(|e| HostError::Internal(format!("cannot encode an accepted message: {e}")))?;
        let seq = self.append(ACCEPTED_EVENT, data).await?;
        if let Some(id) = dedup_id {
            self.accepted.insert(id);
        }
        if let Some(lag) = inbox_lag {
            self.shared.metrics.inbox_accepted(lag);
        }
        if wake {
            if let Some(ctx) = trace {
                self.wake_traces.insert(seq, ctx);
            }
            self.wake.push_back((seq, message));
            self.queued().await;
        } else {
            self.quiet.push((seq, message));
        }
        if let Some(child) = settled_child {
            self.feed(ActivationEvent::ChildDisposed(child)).await;
        }
        Ok(())
    }

    /// Handles what arrived while a turn ran, before the activation hears that the turn
    /// finished: a followup or report sent during the turn is pending input, so the child takes
    /// another turn on it instead of settling with it unread (X2, M3); a drain stop or release
    /// that cancelled the turn (the drain queues it before cancelling) makes the settlement say
    /// `disposed`, not `interrupted` (X1). Commands are handled in arrival order; a release and
    /// whatever follows it wait in the backlog for the main loop, once the turn is over.
    async fn accept_arrivals(&mut self, rx: &mut mpsc::UnboundedReceiver<AgentCmd>) {
        while let Ok(cmd) = rx.try_recv() {
            self.backlog.push_back(cmd);
        }
        loop {
            match self.backlog.front() {
                Some(
                    AgentCmd::Deliver { .. }
                    | AgentCmd::Adopt(_)
                    | AgentCmd::Stop { .. }
                    | AgentCmd::Recover,
                ) => {
                    if let Some(cmd) = self.backlog.pop_front() {
                        self.handle(cmd).await;
                    }
                }
                Some(AgentCmd::Release { .. }) => {
                    self.forced_stop = Some(StopReason::Disposed);
                    if self.activation.is_some() {
                        self.feed(ActivationEvent::Stop).await;
                    }
                    break;
                }
                None => break,
            }
        }
    }

    /// Runs one turn in a `turn` span that joins the trace of its waking message.
    async fn take_turn(&mut self, rx: &mut mpsc::UnboundedReceiver<AgentCmd>) {
        let parent = self
            .wake
            .front()
            .and_then(|(seq, _)| self.wake_traces.remove(seq));
        let op = op_span!("turn", self.shared.node(), parent; index = self.turn_index);
        op.record("session", &self.session)
            .record_opt("parent", self.header.parent_session())
            .record_opt("run", self.run.as_ref().map(|r| &r.run_id))
            .record_opt("shape", self.shape.map(|s| s.as_str()));
        self.trace = Some(op.ctx);
        op.enter(self.take_turn_inner(rx)).await;
        op.record("stop_reason", self.last_stop.as_str());
    }

    /// Runs one turn: one waking message plus every quiet one.
    async fn take_turn_inner(&mut self, rx: &mut mpsc::UnboundedReceiver<AgentCmd>) {
        let mut inputs: Vec<(u64, TurnMessage)> = std::mem::take(&mut self.quiet);
        let woke = self.wake.pop_front();
        if let Some(w) = woke.clone() {
            inputs.push(w);
        }
        inputs.sort_by_key(|(seq, _)| *seq);
        if woke.is_some() {
            self.feed(ActivationEvent::MessageAccepted).await;
        }
        // A child of the agent's stop token: host shutdown cancels the turn too.
        let token = self.stop.child_token();
        if let Ok(mut slot) = self.turn_slot.lock() {
            *slot = Some(token.clone());
        }
        self.feed(ActivationEvent::TurnStarted).await;
        let index = self.turn_index;
        self.turn_index += 1;
        let seqs: Vec<u64> = inputs.iter().map(|(s, _)| *s).collect();
        let mut error: Option<String> = None;
        // Staged, then written as one message: before the driver runs for a resumable session
        // (its inputs are consumed once the turn start is durable; a crash mid-turn does not
        // replay them), at the turn's first barrier (a report, a spawn) or its end for a
        // one-shot run, which is never resumed.
        self.stage(TURN_START_EVENT, json!({"index": index, "inputs": seqs}));
        // The transcript: what the turn read, as `turn/user` events.
        for (_, message) in &inputs {
            self.stage(USER_EVENT, json!({"text": render(message)}));
        }
        // One-shot: the descriptor goes in at the first pre-step (P1).
        if let (Some(SubagentShape::OneShot), Some(descriptor)) = (self.shape, &self.descriptor) {
            let descriptor = descriptor.clone();
            match append_descriptor_at_first_pre_step(&mut self.log, &descriptor, self.shared.now())
            {
                Ok(true) => self.unflushed += 1,
                Ok(false) => {}
                Err(e) => error = Some(e.to_string()),
            }
        }
        if self.shape != Some(SubagentShape::OneShot) && error.is_none() {
            if let Err(e) = self.flush().await {
                error = Some(e.to_string());
            }
        }
        let mut stop;
        if error.is_none() && !token.is_cancelled() {
            let input = TurnInput {
                turn_index: index,
                messages: inputs.into_iter().map(|(_, m)| m).collect(),
            };
            let outcome = tokio::select! {
                r = self.driver.turn(input) => Some(r),
                _ = token.cancelled() => None,
            };
            match outcome {
                None => {
                    self.driver.cancel().await;
                    stop = StopReason::Interrupted;
                }
                Some(Err(e)) => {
                    stop = StopReason::Failed;
                    error = Some(e.to_string());
                }
                Some(Ok(actions)) => {
                    stop = self.run_actions(actions, &token, &mut error).await;
                }
            }
        } else if token.is_cancelled() {
            stop = StopReason::Interrupted;
        } else {
            stop = StopReason::Failed;
        }
        if let Ok(mut slot) = self.turn_slot.lock() {
            *slot = None;
        }
        if let Some(forced) = self.forced_stop {
            if stop == StopReason::Interrupted {
                stop = forced;
            }
        }
        self.last_stop = stop;
        let mut end = json!({"index": index, "stop_reason": stop.as_str()});
        if let Some(e) = &error {
            end["error"] = json!(e);
        }
        // Staged: written with whatever comes next (an accepted arrival, the settlement
        // commit's flush) or, at the latest, below, once the activation has heard of it.
        self.stage(TURN_END_EVENT, end);
        // Host shutdown: no settlement, the session stays resumable.
        if self.done || self.stop.is_cancelled() {
            self.flush_turn().await;
            return;
        }
        self.accept_arrivals(rx).await;
        match self.activation.is_some() {
            true => {
                self.feed(ActivationEvent::TurnFinished {
                    stop_reason: Some(stop.as_str().to_owned()),
                })
                .await
            }
            false => {
                self.busy = false;
                if !self.wake.is_empty() {
                    self.busy = true;
                    self.want_turn = true;
                }
            }
        }
        self.flush_turn().await;
    }

    /// Writes what the turn left staged (a no-op when a barrier already did).
    async fn flush_turn(&mut self) {
        if let Err(e) = self.flush().await {
            tracing::warn!(session = %self.session, error = %e, "turn not recorded; it is retried with the next append");
        }
    }

    /// Executes a turn's driver actions in order; returns the turn's stop reason.
    async fn run_actions(
        &mut self,
        actions: Vec<DriverAction>,
        token: &CancellationToken,
        error: &mut Option<String>,
    ) -> StopReason {
        for action in actions {
            if token.is_cancelled() {
                return StopReason::Interrupted;
            }
            match action {
                DriverAction::Reply(text) => {
                    self.last_assistant = Some(text.clone());
                    if let Err(e) = self.record(ASSISTANT_EVENT, json!({"text": text})).await {
                        *error = Some(e.to_string());
                        return StopReason::Failed;
                    }
                }
                DriverAction::Report { content, delivery } => {
                    if let Err(e) = self.report(content, delivery).await {
                        *error = Some(e.to_string());
                        return StopReason::Failed;
                    }
                }
                DriverAction::Spawn(spec) => self.spawn_from_turn(*spec).await,
                DriverAction::WaitChildren => {}
                DriverAction::SleepMs(ms) => {
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => {}
                        _ = token.cancelled() => return StopReason::Interrupted,
                    }
                }
                DriverAction::Fail(reason) => {
                    *error = Some(reason);
                    return StopReason::Failed;
                }
            }
        }
        StopReason::Completed
    }
}
