//! Executing the engine's commands, in order (the shell of `lineage_core::engine`).
//!
//! Durability conditions are checked, not assumed: before each command the executor reads its
//! barrier ([`EngineCommand::barrier`]). An answer, a report, a birth, a turn's start, a
//! hand-off or the settlement commit that depends on log seq N runs only once the log is
//! durable through N ([`AgentTask::durable_seq`]): when it is not (a flush the engine asked
//! for failed, or none was asked for), the executor writes what is staged first and does not
//! run the command if that fails. A dispose that carries its log (`with_log`) is written
//! together with it, and nothing after it runs unless both succeeded. A failed flush answers
//! whoever waits with the error, fails the turn it was to start, refuses the birth it was to
//! allow, and stops the agent before a settlement commit: never notify before the commit.

use lineage_core::descriptor::append_descriptor_at_first_pre_step;
use lineage_core::engine::{
    Answer, Barrier, EngineCommand, EngineEvent, RecordedState, TurnOutcome,
};
use lineage_core::messages::{InboxMessage, LifecycleEvent, StopReason};
use lineage_registry::types::{Command, RegistryRefusal, SessionState};

use super::{AgentTask, Delivered, Pending};
use crate::control::OneShotResult;
use crate::error::HostError;
use crate::settle::publish_with_retry;
use crate::telemetry::op_span;
use lineage_drivers::driver::ActionOutcome;

/// What a list left for the turn runner.
#[derive(Debug, Default)]
pub(crate) struct Leftover {
    /// `RunTurn`: the driver runs on these.
    pub(crate) run: Option<(u64, Vec<lineage_core::journal::TurnMessage>, Vec<String>)>,
    /// `BeforeBirth` passed (the birth may go ahead), or its flush failed.
    pub(crate) birth: Option<Result<(), String>>,
}

impl AgentTask {
    /// Executes `commands` in order. A settlement (a list with a commit) runs in a `settle`
    /// span, continuing the current operation or the last turn.
    pub(crate) fn exec(
        &mut self,
        commands: Vec<EngineCommand>,
    ) -> lineage_drivers::driver::BoxFuture<'_, Leftover> {
        Box::pin(async move {
            let settles = commands
                .iter()
                .any(|c| matches!(c, EngineCommand::CommitSettlement { .. }));
            if !settles {
                return self.exec_all(commands).await;
            }
            let parent = lineage_bus::trace::current().or(self.trace);
            let op = op_span!("settle", self.shared.node(), parent);
            op.record("session", &self.session)
                .record_opt("parent", self.header.parent_session())
                .record_opt("run", self.run.as_ref().map(|r| &r.run_id))
                .record_opt("shape", self.shape.map(|s| s.as_str()));
            let left = op.enter(self.exec_all(commands)).await;
            op.record("stop_reason", self.engine.last_stop().as_str());
            left
        })
    }

    async fn exec_all(&mut self, commands: Vec<EngineCommand>) -> Leftover {
        let mut left = Leftover::default();
        let mut failed: Option<String> = None;
        let mut follow = Vec::new();
        for command in commands {
            // The command's barrier: `Err` when what it depends on cannot be made durable.
            let gate: Result<(), String> = match command.barrier() {
                Barrier::None => Ok(()),
                Barrier::DurableThrough(seq) => {
                    let gate = self.durable_through(seq, failed.as_deref()).await;
                    if let (Err(e), None) = (&gate, &failed) {
                        // A write this barrier made failed: nothing after it that depends on
                        // the log runs either, as after a failed `Flush`.
                        failed = Some(e.clone());
                    }
                    gate
                }
                Barrier::WrittenWith(_) => failed.clone().map_or(Ok(()), Err),
            };
            match command {
                EngineCommand::Stage { seq, event } => {
                    if let lineage_core::journal::JournalEvent::Accepted(a) = &event {
                        self.staged_wake = a.wake.then_some(seq);
                    }
                    let (kind, data) = event.to_parts();
                    let at = self.log.append(kind, data, self.shared.now()).seq;
                    self.unflushed += 1;
                    debug_assert_eq!(at, seq, "engine and log disagree on seqs");
                }
                EngineCommand::StageDescriptor { seq } => {
                    if let Some(descriptor) = self.descriptor.clone() {
                        match append_descriptor_at_first_pre_step(
                            &mut self.log,
                            &descriptor,
                            self.shared.now(),
                        ) {
                            Ok(true) => self.unflushed += 1,
                            Ok(false) => {}
                            Err(e) => failed = Some(e.to_string()),
                        }
                    }
                    debug_assert_eq!(self.log.last_seq(), seq);
                }
                EngineCommand::Flush => {
                    if failed.is_none() {
                        if let Err(e) = self.flush().await {
                            failed = Some(e.to_string());
                        }
                    }
                }
                EngineCommand::Answer { reply, answer, .. } => {
                    self.answer(reply, answer, gate.err())
                }
                EngineCommand::TakeTurn => self.want_turn = true,
                EngineCommand::RunTurn {
                    index,
                    messages,
                    request_ids,
                    ..
                } => match gate {
                    Ok(()) => left.run = Some((index, messages, request_ids)),
                    Err(e) => follow.push(EngineEvent::TurnEnded(TurnOutcome::Failed(e))),
                },
                EngineCommand::CancelTurn => self.cancel_turn(),
                EngineCommand::RecordState(state) => {
                    let state = match state {
                        RecordedState::Running => SessionState::Running,
                        RecordedState::Waiting => SessionState::Waiting,
                    };
                    if let Err(e) = self
                        .shared
                        .set_state(&self.session, (state, None), self.epoch)
                        .await
                    {
                        tracing::warn!(session = %self.session, error = %e, state = state.as_str(), "cannot record the state");
                    }
                }
                EngineCommand::PublishReport { report, .. } => {
                    if gate.is_ok()
                        && publish_with_retry(
                            &self.shared,
                            &self.session,
                            InboxMessage::Report(report),
                        )
                        .await
                    {
                        self.shared.metrics.reported();
                    }
                }
                EngineCommand::BeforeBirth { .. } => match gate {
                    Ok(()) => {
                        self.open_inbox();
                        left.birth = Some(Ok(()));
                    }
                    Err(e) => left.birth = Some(Err(e)),
                },
                EngineCommand::CommitSettlement {
                    dispose,
                    with_log,
                    stop_reason,
                    ..
                } => {
                    let began = self.shared.now();
                    let committed = match gate {
                        Ok(()) => self.commit(dispose, with_log, stop_reason).await,
                        Err(e) => Err(HostError::Unavailable(e)),
                    };
                    if committed.is_ok() {
                        let took = self.shared.now().saturating_sub(began);
                        self.shared.metrics.settlement_took(took);
                    }
                    if let Err(e) = committed {
                        // Never notify before the commit: stop here, resumable later.
                        tracing::error!(session = %self.session, error = %e, "settlement not committed; not notifying");
                        self.done = true;
                        return left;
                    }
                }
                EngineCommand::PublishEnd {
                    stop_reason,
                    output,
                } => self.publish_end(stop_reason, output).await,
                EngineCommand::PublishNotice(notice) => {
                    publish_with_retry(&self.shared, &self.session, InboxMessage::Settled(notice))
                        .await;
                }
                EngineCommand::ReturnResult {
                    output,
                    stop_reason,
                    changes,
                } => self.return_result(output, stop_reason, changes).await,
                EngineCommand::HandOff { pending_work, .. } => {
                    // Released only when everything is durable (else it stays placed here,
                    // and its next host resumes it as cut short).
                    if gate.is_ok() {
                        self.handed_off = Some(pending_work);
                    }
                }
                EngineCommand::Leave => self.done = true,
            }
        }
        for event in follow {
            let commands = self.engine.handle(event, self.shared.now());
            let more = Box::pin(self.exec_all(commands)).await;
            left.run = left.run.or(more.run);
        }
        left
    }

    /// The log's last seq that is durable: everything but the `unflushed` staged events.
    pub(crate) fn durable_seq(&self) -> u64 {
        self.log.last_seq().saturating_sub(self.unflushed as u64)
    }

    /// Holds a command until the log is durable through `seq`: `Ok` at once when it is,
    /// else after writing what is staged; `Err` when an earlier flush of this list failed
    /// (`failed`), the write fails, or `seq` was never staged (an engine bug, refused rather
    /// than run).
    async fn durable_through(&mut self, seq: u64, failed: Option<&str>) -> Result<(), String> {
        if let Some(e) = failed {
            return Err(e.to_owned());
        }
        if self.durable_seq() >= seq {
            return Ok(());
        }
        if self.log.last_seq() < seq {
            tracing::error!(session = %self.session, seq, last = self.log.last_seq(), "the engine named a barrier past the log's end");
            return Err(format!(
                "internal: a command waits for log seq {seq}, past the log's end ({})",
                self.log.last_seq()
            ));
        }
        self.flush().await.map_err(|e| e.to_string())
    }

    /// Sends an engine answer to whoever waits; when its barrier failed, the failure instead.
    fn answer(&mut self, reply: u64, answer: Answer, failed: Option<String>) {
        let Some(pending) = self.pending.remove(&reply) else {
            return;
        };
        match pending {
            Pending::Deliver {
                reply,
                inbox_lag,
                trace,
            } => {
                let outcome = match (failed, answer) {
                    (Some(e), _) => Err(HostError::Unavailable(e)),
                    (None, Answer::Accepted) => {
                        // Something arrived: its tree is active ([`crate::idle`]).
                        self.idle_since_ms
                            .store(self.shared.now(), std::sync::atomic::Ordering::Relaxed);
                        if let Some(lag) = inbox_lag {
                            self.shared.metrics.inbox_accepted(lag);
                        }
                        // The turn this message wakes joins the sender's trace.
                        if let (Some(ctx), Some(seq)) = (trace, self.staged_wake.take()) {
                            self.wake_traces.insert(seq, ctx);
                        }
                        Ok(Delivered::Accepted)
                    }
                    (None, Answer::Duplicate) => {
                        if inbox_lag.is_some() {
                            self.shared.metrics.inbox_duplicate();
                        }
                        Ok(Delivered::Duplicate)
                    }
                    (None, Answer::NotLive) => Err(self.shared.live.not_live(&self.session)),
                    (None, other) => Err(HostError::Internal(format!(
                        "unexpected answer to a delivery: {other:?}"
                    ))),
                };
                let _ = reply.send(outcome);
            }
            Pending::Action(reply) => {
                let outcome = match (failed, answer) {
                    (Some(e), _) => ActionOutcome::Refused(e),
                    (None, Answer::Done) => ActionOutcome::Done,
                    (None, Answer::Born { child, result }) => ActionOutcome::Born {
                        child,
                        result: result.and_then(|r| serde_json::from_value(r).ok()),
                    },
                    (None, Answer::Refused(e)) => ActionOutcome::Refused(e),
                    (None, Answer::Arrived { messages, complete }) => {
                        ActionOutcome::Arrived { messages, complete }
                    }
                    (None, other @ (Answer::Accepted | Answer::Duplicate | Answer::NotLive)) => {
                        ActionOutcome::Refused(format!("unexpected answer to an action: {other:?}"))
                    }
                };
                let _ = reply.send(outcome);
            }
        }
    }

    /// The settlement commit: `settled`, or for a one-shot run a dispose in the same write
    /// (only `settled` when the registry still holds undisposed children it does not own).
    /// `with_log`: the staged events are written at the same time as the dispose, not before
    /// it; both must succeed before anyone is told.
    async fn commit(
        &mut self,
        dispose: bool,
        with_log: bool,
        stop: StopReason,
    ) -> Result<(), HostError> {
        if !with_log {
            self.flush().await?;
        }
        let mut disposed = false;
        if dispose {
            let (shared, session) = (self.shared.clone(), self.session.clone());
            let write = async move {
                shared
                    .write(|request_id, at_ms| Command::Dispose {
                        stop_reason: Some(stop),
                        request_id,
                        at_ms,
                        session: session.clone(),
                    })
                    .await
            };
            let (flushed, written) = match with_log {
                true => tokio::join!(self.flush(), write),
                false => (Ok(()), write.await),
            };
            match written {
                Ok(_) => disposed = true,
                Err(HostError::Refused(RegistryRefusal::UndisposedChildren { .. })) => {}
                Err(e) => return Err(e),
            }
            flushed?;
        }
        self.disposed_at_settle = disposed;
        if !disposed {
            // `settled` (undisposed children): its log is durable first.
            self.flush().await?;
            self.shared
                .set_state(
                    &self.session,
                    (SessionState::Settled, Some(stop)),
                    self.epoch,
                )
                .await?;
        }
        self.shared.metrics.settled(stop);
        tracing::info!(session = %self.session, stop_reason = stop.as_str(), "settled (committed)");
        Ok(())
    }

    /// `subagent/end` on the parent's end subject (E1), paired by run id.
    async fn publish_end(&mut self, stop: StopReason, output: Option<String>) {
        let Some(run) = &self.run else { return };
        let end = run.ended(stop, output, self.shared.now());
        if let Err(e) = self
            .shared
            .bus
            .lifecycle
            .publish(&LifecycleEvent::End(end))
            .await
        {
            tracing::warn!(session = %self.session, error = %e, "cannot publish subagent/end");
        }
    }

    /// A one-shot run's result to its caller, once committed; its inbox consumer (which
    /// exists only if it spawned) is cleanup, after it.
    async fn return_result(
        &mut self,
        output: Option<String>,
        stop: StopReason,
        changes: Option<Box<lineage_core::workspace::WorkspaceChanges>>,
    ) {
        if let Some(tx) = self.one_shot.take() {
            let _ = tx.send(OneShotResult {
                output,
                structured: None,
                stop_reason: stop,
                changes,
            });
        }
        if self.disposed_at_settle && self.unopened_inbox.is_none() {
            let _ = self.shared.bus.inbox.delete_consumer(&self.session).await;
        }
    }

    /// Makes every staged event durable, as one message. Optimistic: a conflict means another
    /// node owns the session now, and this agent stops. On failure the staged events stay
    /// staged (the next flush writes them).
    ///
    /// At a turn's end, when [`lineage_core::log::compaction_due`] says so, that one message is
    /// the whole log (a compaction, the same one round trip); the messages it supersedes are
    /// dropped after the turn's end is announced ([`AgentTask::drop_superseded`]).
    pub(crate) async fn flush(&mut self) -> Result<(), HostError> {
        if self.unflushed == 0 {
            return Ok(());
        }
        let events = self.log.events();
        let compact = self.turn_ending
            && lineage_core::log::compaction_due(events.len(), self.log_messages + 1);
        let written = match compact {
            true => self
                .shared
                .bus
                .events
                .compact(&self.session, events, self.cursor)
                .await
                .map(|c| c.map(|c| (c, true))),
            false => Ok(None),
        };
        let written = match written {
            Ok(Some(done)) => Ok(done),
            // Not compacting, or the whole log is too large for one message: the staged
            // events alone.
            Ok(None) => {
                let staged = &events[events.len().saturating_sub(self.unflushed)..];
                self.shared
                    .bus
                    .events
                    .append_all(&self.session, staged, Some(self.cursor))
                    .await
                    .map(|c| (c, false))
            }
            Err(e) => Err(e),
        };
        match written {
            Ok((cursor, compacted)) => {
                self.cursor = cursor;
                self.unflushed = 0;
                if compacted {
                    self.log_messages = 1;
                    self.superseded = Some(cursor);
                } else {
                    self.log_messages += 1;
                }
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
}
