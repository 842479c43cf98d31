//! Taking a turn, with the mailbox open (H1, M1, M3, S1).
//!
//! The driver runs in its own future (it owns the driver for the turn), so the task keeps
//! serving while it runs: the driver's actions ([`TurnCtx`]), births it asked for (a one-shot
//! child is awaited without blocking anything else), the actions beside the task
//! ([`super::actions`]: followups, interrupts, lists, waits) and the mailbox. A followup or inbox
//! message that arrives mid-turn is accepted into the log and answered at once; it is the next
//! turn. A drain stop cancels the turn; a drain release that arrives mid-turn cancels it and
//! waits, with whatever follows it, until the turn is over.

use std::future::Future;
use std::pin::Pin;

use futures::stream::{FuturesUnordered, StreamExt};
use lineage_core::descriptor::SubagentShape;
use lineage_core::engine::{EngineEvent, TurnOutcome};
use tokio::sync::mpsc;

use super::actions::Side;
use super::output::TurnStream;
use super::{AgentCmd, AgentTask, Pending};
use crate::control::SpawnReply;
use crate::error::HostError;
use crate::spawn::ParentCtx;
use crate::telemetry::op_span;
use lineage_drivers::driver::{
    ActionOutcome, AgentDriver, DriverAction, TurnAction, TurnCtx, TurnInput, TurnRequest,
};

/// How many times a turn's end tries to store its checkpoint when the bus errs (issue 39).
const CHECKPOINT_TRIES: u32 = 4;

/// A birth in flight: who waits, the child's shape, the outcome.
type Birth =
    Pin<Box<dyn Future<Output = (u64, SubagentShape, Result<SpawnReply, HostError>)> + Send>>;

impl AgentTask {
    /// Runs one turn in an `invoke_agent` span (the OpenTelemetry GenAI conventions, see
    /// [`crate::telemetry::genai`]) that joins the trace of its waking message.
    pub(crate) async fn take_turn(&mut self, rx: &mut mpsc::UnboundedReceiver<AgentCmd>) {
        let parent = self
            .engine
            .next_wake_seq()
            .and_then(|seq| self.wake_traces.remove(&seq));
        let op = op_span!("invoke_agent", self.shared.node(), parent;
            index = self.engine.next_turn_index(),
            otel.name = crate::telemetry::genai::span_name(&self.agent_name).as_str(),
            gen_ai.operation.name = crate::telemetry::genai::INVOKE_AGENT,
            gen_ai.agent.name = self.agent_name.as_str(),
            gen_ai.conversation.id = %self.session,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            lineage.context_window = tracing::field::Empty,
        );
        op.record("session", &self.session)
            .record_opt("parent", self.header.parent_session())
            .record_opt("run", self.run.as_ref().map(|r| &r.run_id))
            .record_opt("shape", self.shape.map(|s| s.as_str()));
        self.trace = Some(op.ctx);
        self.turn_usage = None;
        let began = self.shared.now();
        op.enter(self.run_turn(rx)).await;
        self.shared
            .metrics
            .turned(self.shared.now().saturating_sub(began));
        op.record("stop_reason", self.engine.last_stop().as_str());
        if let Some(usage) = self.turn_usage.take() {
            // As i64: the bridge exports a u64 field as text.
            let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            op.span
                .record("gen_ai.usage.input_tokens", int(usage.used_tokens));
            if let Some(size) = usage.size_tokens {
                op.span.record("lineage.context_window", int(size));
            }
        }
    }

    /// The turn itself, inside its `invoke_agent` span.
    async fn run_turn(&mut self, rx: &mut mpsc::UnboundedReceiver<AgentCmd>) {
        // A child of the agent's stop token: host shutdown cancels the turn too.
        let token = self.stop.child_token();
        if let Ok(mut slot) = self.turn_slot.lock() {
            *slot = Some(token.clone());
        }
        let commands = self
            .engine
            .handle(EngineEvent::BeginTurn, self.shared.now());
        let left = self.exec(commands).await;
        let (Some((index, messages, request_ids)), Some(mut driver)) =
            (left.run, self.driver.take())
        else {
            self.clear_slot();
            return;
        };
        let stream = TurnStream::open(
            self.shared.bus.output.clone(),
            self.session.clone(),
            index,
            request_ids,
            self.shared.now(),
        )
        .await;
        self.turn_reply = None;
        let (ctx, mut requests) = TurnCtx::channel();
        let mint = self.shared.mint.clone();
        let ctx = ctx
            .with_output(stream.sink())
            .with_ids(std::sync::Arc::new(move || mint.session()));
        let input = TurnInput {
            turn_index: index,
            messages,
        };
        let cancel = token.clone();
        let mut turn = Box::pin(async move {
            let outcome = if cancel.is_cancelled() {
                None
            } else {
                tokio::select! {
                    r = drive(driver.as_mut(), input, ctx) => Some(r),
                    _ = cancel.cancelled() => None,
                }
            };
            if outcome.is_none() {
                driver.cancel().await;
            }
            (driver, outcome)
        });
        let mut births: FuturesUnordered<Birth> = FuturesUnordered::new();
        let mut sides: FuturesUnordered<Side> = FuturesUnordered::new();
        let mut mailbox = true;
        let (driver, outcome) = loop {
            tokio::select! {
                biased;
                r = &mut turn => break r,
                Some(request) = requests.recv() => {
                    self.on_request(request, &mut births, &mut sides).await
                }
                Some(born) = births.next(), if !births.is_empty() => self.on_birth(born).await,
                Some(done) = sides.next(), if !sides.is_empty() => self.on_side(done).await,
                cmd = rx.recv(), if mailbox => match cmd {
                    Some(cmd) => mailbox = self.mid_turn(cmd).await,
                    None => mailbox = false,
                },
            }
        };
        // A birth still in flight (the turn was cancelled while it ran) is seen through; the
        // other actions in flight are dropped (nobody waits for them).
        drop(sides);
        while let Some(born) = births.next().await {
            self.on_birth(born).await;
        }
        self.driver = Some(driver);
        self.clear_slot();
        // What arrived as the turn ended is taken before the engine hears of its end: a
        // followup sent mid-turn is the next turn, not a settlement and a cold resume.
        while mailbox {
            match rx.try_recv() {
                Ok(cmd) => mailbox = self.mid_turn(cmd).await,
                Err(_) => break,
            }
        }
        let outcome = match outcome {
            None => TurnOutcome::Cancelled,
            Some(Err(e)) => TurnOutcome::Failed(e),
            Some(Ok(())) => TurnOutcome::Completed,
        };
        // What the driver keeps of its agent across a resume (an A2A agent's remote task),
        // written with the turn's end.
        let state = self.driver.as_mut().and_then(|d| d.take_state());
        if let Some(state) = state {
            self.feed(EngineEvent::DriverState(state)).await;
        }
        // The turn's files, stored before its end is written (issue 39): a turn whose files
        // could not be stored does not end as completed.
        let outcome = outcome.with_checkpoint(self.checkpoint().await);
        // Host shutdown: no settlement, the session stays resumable.
        let ended = outcome.clone();
        let event = match self.done || self.stop.is_cancelled() {
            true => EngineEvent::TurnAbandoned(outcome),
            false => EngineEvent::TurnEnded(outcome),
        };
        self.turn_ending = true;
        self.feed(event).await;
        // After the turn's end is durable: whoever watches the output learns it ended. Not when
        // it cannot be written (it stays staged; the log is the record, and `turn-end` says its
        // end is durable).
        let reply = self.turn_reply.take();
        let flushed = self.flush().await;
        self.turn_ending = false;
        if flushed.is_ok() {
            stream
                .close(&ended, reply, self.turn_usage.clone(), self.shared.now())
                .await;
        }
        self.drop_superseded().await;
    }

    /// Drops the messages a compaction at this turn's end restates (issue 35). Best effort: a
    /// failure leaves them, and a read still meets each event once.
    async fn drop_superseded(&mut self) {
        let Some(compaction) = self.superseded.take() else {
            return;
        };
        if let Err(e) = self
            .shared
            .bus
            .events
            .drop_superseded(&self.session, compaction)
            .await
        {
            tracing::warn!(session = %self.session, error = %e, "cannot purge the log's messages before its compaction; they stay");
        }
    }

    /// A checkpoint of the session's files (issue 39): stored, then its snapshot staged to be
    /// written with the turn's end. A bus error is tried again ([`CHECKPOINT_TRIES`] in all,
    /// 250 ms, 500 ms, 1 s apart); one that still cannot be stored (or is over the profile's
    /// cap) is the one-line reason the turn fails, and the log keeps naming the last one that
    /// was (the next turn's end tries again).
    async fn checkpoint(&mut self) -> Result<(), String> {
        let Some(workspace) = &mut self.workspace else {
            return Ok(());
        };
        let (dir, caps, n) = (
            workspace.dir.clone(),
            workspace.caps,
            workspace.checkpoints + 1,
        );
        let (files, mut manifest) = (workspace.files.clone(), workspace.manifest.take());
        // The bus may be away for a moment (a leader change): the turn's end waits for a few
        // tries before it fails without this checkpoint.
        let mut pause = std::time::Duration::from_millis(250);
        let mut tries = 0;
        let saved = loop {
            tries += 1;
            let stored = self
                .shared
                .checkpoint(&self.session, &dir, caps, n, &files, &mut manifest)
                .await;
            match stored {
                Err(HostError::Bus(e)) if tries < CHECKPOINT_TRIES => {
                    tracing::info!(session = %self.session, error = %e, "checkpoint not stored; trying again");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                other => break other,
            }
        };
        if let Some(workspace) = &mut self.workspace {
            workspace.manifest = manifest;
        }
        match saved {
            Ok(None) => Ok(()),
            Ok(Some(snapshot)) => {
                if let Some(workspace) = &mut self.workspace {
                    workspace.checkpoints = n;
                    workspace.files = lineage_core::workspace::WorkspaceChanges::new(
                        workspace.files.base.clone(),
                        snapshot.clone(),
                    );
                }
                self.feed(EngineEvent::WorkspaceSaved(snapshot)).await;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(session = %self.session, error = %e, tries, "cannot checkpoint the session's files; the last checkpoint stays");
                Err(format!(
                    "the turn's files were not checkpointed ({e}); the session's last checkpoint stays"
                ))
            }
        }
    }

    /// The turn is over: the agent is idle from now ([`crate::idle`]).
    fn clear_slot(&self) {
        self.idle_since_ms
            .store(self.shared.now(), std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut slot) = self.turn_slot.lock() {
            *slot = None;
        }
    }

    /// A command that arrived during the turn; false once the mailbox must wait (a release).
    async fn mid_turn(&mut self, cmd: AgentCmd) -> bool {
        match cmd {
            AgentCmd::Release { reason, .. } => {
                self.cancel_turn();
                self.feed(EngineEvent::Stop(reason)).await;
                self.backlog.push_back(cmd);
                false
            }
            AgentCmd::Deliver { .. }
            | AgentCmd::Adopt(_)
            | AgentCmd::OpenInbox
            | AgentCmd::Stop { .. }
            | AgentCmd::Recover
            | AgentCmd::Quiesce
            | AgentCmd::HandOff(_) => {
                self.handle(cmd).await;
                true
            }
        }
    }

    /// An action the driver asked for during its turn.
    async fn on_request(
        &mut self,
        request: TurnRequest,
        births: &mut FuturesUnordered<Birth>,
        sides: &mut FuturesUnordered<Side>,
    ) {
        let TurnRequest { action, reply } = request;
        if let TurnAction::Usage(usage) = action {
            self.turn_usage = Some(usage.clone());
            self.context_tokens
                .store(usage.used_tokens, std::sync::atomic::Ordering::Relaxed);
            // The report is cumulative: what it adds to the last one seen is the new cost.
            if let (Some(micros), Some(currency)) = (usage.cost_micros, usage.currency.as_deref()) {
                let before = match &self.cost_seen {
                    Some((seen, before)) if seen == currency => *before,
                    _ => 0,
                };
                self.shared
                    .metrics
                    .cost_added(currency, micros.saturating_sub(before));
                self.cost_seen = Some((currency.to_owned(), micros.max(before)));
            }
            // Best effort and fenced by the epoch: no log record, nothing waits on it.
            if let Err(e) = self
                .shared
                .record_usage(&self.session, usage, self.epoch)
                .await
            {
                tracing::warn!(session = %self.session, error = %e, "cannot record usage");
            }
            let _ = reply.send(ActionOutcome::Done);
            return;
        }
        let id = self.reply_id(Pending::Action(reply));
        match action {
            TurnAction::Reply(text) => {
                self.turn_reply = Some(text.clone());
                self.feed(EngineEvent::Replied { text, reply: id }).await
            }
            TurnAction::Report { content, delivery } => {
                let op = op_span!("report", self.shared.node());
                op.record("session", &self.session)
                    .record_opt("parent", self.header.parent_session())
                    .record_opt("run", self.run.as_ref().map(|r| &r.run_id));
                op.enter(self.feed(EngineEvent::Report {
                    content,
                    delivery,
                    reply: id,
                }))
                .await;
            }
            TurnAction::Spawn(spec) => {
                let call = serde_json::to_vec(&spec)
                    .ok()
                    .map(|json| lineage_core::engine::call_fingerprint(&json));
                let commands = self
                    .engine
                    .handle(EngineEvent::Spawn { reply: id, call }, self.shared.now());
                match self.exec(commands).await.birth {
                    Some(Ok(())) => births.push(self.birth(*spec, id)),
                    Some(Err(e)) => {
                        let error = format!("spawn refused: the parent's log is not writable: {e}");
                        self.feed(EngineEvent::BirthRefused { error, reply: id })
                            .await
                    }
                    None => {}
                }
            }
            side @ (TurnAction::Followup { .. }
            | TurnAction::Interrupt { .. }
            | TurnAction::ChildTask { .. }
            | TurnAction::ListChildren
            | TurnAction::ApplyChildChanges { .. }
            | TurnAction::WaitChildren { .. }) => self.side_action(side, id, sides).await,
            TurnAction::Usage(_) => {} // handled above, before a reply id is taken
        }
    }

    /// The birth of a child this agent asked for, in a `spawn` span (runs beside the task).
    fn birth(&self, spec: lineage_drivers::driver::ChildSpec, reply: u64) -> Birth {
        let parent = ParentCtx {
            header: self.header.clone(),
            policy_view: self.policy_view,
            preset: self.preset.clone(),
            tool_filter: self.descriptor.as_ref().and_then(|d| d.tool_filter.clone()),
            workspace: self.workspace.as_ref().map(|w| (w.dir.clone(), w.caps)),
        };
        let shared = self.shared.clone();
        let session = self.session.clone();
        Box::pin(async move {
            let shape = spec.shape;
            let request_id = shared.mint.request();
            let op = op_span!("spawn", shared.node());
            op.record("parent", &session)
                .record("shape", shape.as_str());
            let outcome = op
                .run(
                    shared
                        .clone()
                        .spawn_child(parent, spec, request_id, None, false),
                )
                .await;
            if let Ok(reply) = &outcome {
                op.record("session", &reply.session)
                    .record_opt("run", reply.run.as_ref());
            }
            (reply, shape, outcome)
        })
    }

    async fn on_birth(&mut self, born: (u64, SubagentShape, Result<SpawnReply, HostError>)) {
        let (reply, shape, outcome) = born;
        let event = match outcome {
            Ok(r) => EngineEvent::ChildBorn {
                child: r.session,
                shape,
                node: r.node,
                run: r.run,
                result: r.result.and_then(|res| serde_json::to_value(res).ok()),
                reply,
            },
            Err(e) => {
                tracing::info!(session = %self.session, error = %e, "spawn refused");
                EngineEvent::BirthRefused {
                    error: e.to_string(),
                    reply,
                }
            }
        };
        self.feed(event).await;
    }
}

/// Runs the driver's turn, then the actions it returned, in order, through the same context
/// (so they are done inside the turn, as if asked during it). A refused reply or report fails
/// the turn; a refused spawn does not (it is in the log as feedback for the agent).
async fn drive(driver: &mut dyn AgentDriver, input: TurnInput, ctx: TurnCtx) -> Result<(), String> {
    let actions = driver
        .turn_with(input, ctx.clone())
        .await
        .map_err(|e| e.to_string())?;
    for action in actions {
        match action {
            DriverAction::Reply(text) => {
                if let ActionOutcome::Refused(e) = ctx.act(TurnAction::Reply(text)).await {
                    return Err(e);
                }
            }
            DriverAction::Report { content, delivery } => {
                if let ActionOutcome::Refused(e) =
                    ctx.act(TurnAction::Report { content, delivery }).await
                {
                    return Err(e);
                }
            }
            DriverAction::Spawn(spec) => {
                ctx.act(TurnAction::Spawn(spec)).await;
            }
            DriverAction::WaitChildren => {}
            DriverAction::SleepMs(ms) => {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await
            }
            DriverAction::Fail(reason) => return Err(reason),
        }
    }
    Ok(())
}
