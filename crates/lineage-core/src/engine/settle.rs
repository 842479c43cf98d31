//! The activation's decisions as commands (X2, M2, S1, X1): waiting, settling, drain.
//!
//! Settlement is, in this order: capture (a continuable child stages its notice as
//! `outbox/settled`, with the next outbox seq), flush and commit (`settled`, or a dispose for a
//! one-shot run), leave, `subagent/end`, then the notice to the parent (or the result to a
//! one-shot caller). Nothing is published before the commit.

use crate::activation::{ActivationAction, ActivationEvent};
use crate::descriptor::SubagentShape;
use crate::journal::JournalEvent;
use crate::messages::{settlement_summary, StopReason, SubagentSettled};

use super::{AgentEngine, EngineCommand, RecordedState};

/// Reads a stop reason the engine wrote with [`StopReason::as_str`] (the activation keeps the
/// text it was given).
pub fn stop_reason_from(text: Option<&str>) -> StopReason {
    text.and_then(StopReason::parse)
        .unwrap_or(StopReason::Completed)
}

impl AgentEngine {
    /// Feeds the activation (none at top level: nothing to decide) and translates its actions.
    pub(super) fn feed(
        &mut self,
        event: ActivationEvent,
        out: &mut Vec<EngineCommand>,
        now_ms: u64,
    ) {
        let Some(act) = self.activation.as_mut() else {
            return;
        };
        // A refused event (a message or adoption after settling) has its own explicit outcome
        // at the caller; an activation refusal here means nothing to do.
        let Ok(actions) = act.handle(event) else {
            return;
        };
        for action in actions {
            match action {
                ActivationAction::StartTurn => {
                    if self.recorded_waiting {
                        self.recorded_waiting = false;
                        out.push(EngineCommand::RecordState(RecordedState::Running));
                    }
                    self.want_turn(out);
                }
                ActivationAction::CancelTurn => out.push(EngineCommand::CancelTurn),
                ActivationAction::EnterWaiting => {
                    self.recorded_waiting = true;
                    out.push(EngineCommand::RecordState(RecordedState::Waiting));
                }
                ActivationAction::CaptureResult { stop_reason } => {
                    self.capture(stop_reason.as_deref(), out, now_ms)
                }
                ActivationAction::MarkTerminal => {
                    // A one-shot run is disposed: its last events go with the commit (one
                    // round trip less before its result); a settlement that can be resumed
                    // has its log durable first.
                    let dispose = self.shape == Some(SubagentShape::OneShot);
                    let after_seq = match dispose {
                        true => self.write_alongside(),
                        false => self.flush(out),
                    };
                    out.push(EngineCommand::CommitSettlement {
                        dispose,
                        with_log: dispose,
                        stop_reason: self.settled_stop(),
                        after_seq,
                    });
                }
                ActivationAction::DisposeHandle => {
                    self.left = true;
                    out.push(EngineCommand::Leave);
                }
                ActivationAction::SettleObservers => out.push(EngineCommand::PublishEnd {
                    stop_reason: self.settled_stop(),
                    output: self.last_assistant.clone(),
                }),
                ActivationAction::DeliverSettlement { .. } => match self.shape {
                    Some(SubagentShape::OneShot) => out.push(EngineCommand::ReturnResult {
                        output: self.last_assistant.clone(),
                        stop_reason: self.settled_stop(),
                        changes: self.workspace.clone().map(Box::new),
                    }),
                    Some(SubagentShape::Continuable) | None => {
                        if let Some(notice) = self.notice.take() {
                            out.push(EngineCommand::PublishNotice(notice));
                        }
                    }
                },
            }
        }
    }

    /// The stop reason of the settlement (captured), else of the last turn.
    pub(super) fn settled_stop(&self) -> StopReason {
        self.captured_stop.unwrap_or(self.last_stop)
    }

    /// Step 1 of a settlement: the result, and a continuable child's notice staged with the
    /// next outbox seq (durable with the commit's flush; a resumed child never reuses it).
    fn capture(&mut self, stop_reason: Option<&str>, out: &mut Vec<EngineCommand>, now_ms: u64) {
        let stop = self
            .forced_stop
            .unwrap_or_else(|| stop_reason_from(stop_reason));
        self.captured_stop = Some(stop);
        let parent = match (self.shape, &self.parent) {
            (Some(SubagentShape::Continuable), Some(parent)) => parent.clone(),
            (Some(SubagentShape::Continuable), None) | (Some(SubagentShape::OneShot) | None, _) => {
                return
            }
        };
        self.outbox_seq += 1;
        let label = self
            .label
            .clone()
            .unwrap_or_else(|| self.session.to_string());
        let output = self.last_assistant.clone();
        let summary = settlement_summary(&label, stop, output.as_deref());
        let seq = self.outbox_seq;
        self.stage(
            JournalEvent::SettledSent {
                seq,
                stop_reason: stop,
                summary: summary.clone(),
            },
            out,
        );
        let mut notice = SubagentSettled::new(
            self.session.clone(),
            parent,
            seq,
            &summary,
            stop,
            output,
            now_ms,
        );
        notice.changes = self.workspace.clone().map(Box::new);
        self.notice = Some(notice);
    }

    /// Drain step 2: no more turns; a cut-short turn says `reason` (`disposed` for a drain,
    /// `deadline` when the deadline sweeper drains, Q2).
    /// Final (X3): a turn that was due never starts, and no message accepted afterwards (a
    /// child's disposal notice included) starts one; they are recorded in the log only.
    pub(super) fn stop(&mut self, reason: StopReason, out: &mut Vec<EngineCommand>, now_ms: u64) {
        self.forced_stop = Some(reason);
        self.turn_due = false;
        if self.in_turn.is_some() {
            out.push(EngineCommand::CancelTurn);
        }
        self.feed(ActivationEvent::Stop, out, now_ms);
    }

    /// Drain wave: stop, every owned child is gone (leaves first), settle and leave.
    pub(super) fn release(
        &mut self,
        reason: StopReason,
        out: &mut Vec<EngineCommand>,
        now_ms: u64,
    ) {
        self.stop(reason, out, now_ms);
        for child in self.owned_children() {
            self.feed(ActivationEvent::ChildDisposed(child), out, now_ms);
        }
        if !self.left {
            self.left = true;
            out.push(EngineCommand::Leave);
        }
    }

    /// Re-adoption: with no turn running, due or pending, the activation hears that the last
    /// turn ended (with its stop reason), or that the agent is idle.
    pub(super) fn recover(&mut self, out: &mut Vec<EngineCommand>, now_ms: u64) {
        let busy = self.activation.as_ref().is_some_and(|a| a.is_busy());
        if busy || self.in_turn.is_some() || self.turn_due || !self.wake.is_empty() {
            return;
        }
        let event = match self.ended_turn {
            Some(stop) => ActivationEvent::TurnFinished {
                stop_reason: Some(stop.as_str().to_owned()),
            },
            None => ActivationEvent::Idle,
        };
        self.feed(event, out, now_ms);
    }
}
