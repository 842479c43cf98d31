//! A turn and what it does while it runs (H1, M1, S1): begin, reply, report, spawn, end.
//!
//! A turn reads one waking message and every quiet one, oldest first. Its `turn/start` (with
//! the log seqs it consumed) and the transcript (`turn/user`) are staged, and durable before
//! the driver runs for a resumable session, so a crash mid-turn never replays its inputs; a
//! one-shot run writes its turn at its barriers (a report, a birth) or at its end. While the
//! turn runs, messages are still accepted ([`super::accept`]) and the driver's actions come in
//! as events, each answered when its effect is durable or done.

use serde_json::Value;

use crate::activation::ActivationEvent;
use crate::descriptor::SubagentShape;
use crate::ids::{NodeId, RunId, SessionId};
use crate::journal::JournalEvent;
use crate::messages::{Delivery, StopReason, SubagentReport};

use super::{AgentEngine, Answer, EngineCommand, ReplyTo, TurnOutcome};

/// A spawn the turn cut short by a lost node made (T5), as the log shows it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LostSpawn {
    /// The call's fingerprint.
    pub(super) call: String,
    /// The child.
    pub(super) child: SessionId,
    /// Its shape.
    pub(super) shape: SubagentShape,
    /// A one-shot child's result, when the log has it.
    pub(super) result: Option<Value>,
}

impl LostSpawn {
    /// Whether the child can answer the repeated call: continuable, or one-shot with a result.
    pub(super) fn answerable(&self) -> bool {
        match self.shape {
            SubagentShape::Continuable => true,
            SubagentShape::OneShot => self.result.is_some(),
        }
    }
}

impl AgentEngine {
    pub(super) fn begin_turn(&mut self, out: &mut Vec<EngineCommand>, now_ms: u64) {
        if !self.turn_due || self.in_turn.is_some() || self.quiesced || self.forced_stop.is_some() {
            // Nothing due, one runs, the host winds down, or a drain stopped the agent (X3:
            // a turn that was due when the stop came never starts): an explicit no-op.
            return;
        }
        self.turn_due = false;
        let mut inputs = std::mem::take(&mut self.quiet);
        let woke = self.wake.pop_front();
        let woke_some = woke.is_some();
        inputs.extend(woke);
        inputs.sort_by_key(|(seq, _)| *seq);
        if woke_some {
            self.feed(ActivationEvent::MessageAccepted, out, now_ms);
        }
        self.feed(ActivationEvent::TurnStarted, out, now_ms);
        let index = self.turn_index;
        self.turn_index += 1;
        self.in_turn = Some(index);
        let seqs: Vec<u64> = inputs.iter().map(|(seq, _)| *seq).collect();
        let request_ids = seqs
            .iter()
            .filter_map(|seq| self.requests.remove(seq))
            .collect();
        self.stage(
            JournalEvent::TurnStart {
                index,
                inputs: seqs,
            },
            out,
        );
        for (_, message) in &inputs {
            self.stage(
                JournalEvent::TurnUser {
                    text: message.render(),
                },
                out,
            );
        }
        if self.descriptor_pending {
            self.descriptor_pending = false;
            let seq = self.next_seq;
            self.next_seq += 1;
            out.push(EngineCommand::StageDescriptor { seq });
        }
        let after_seq = match self.shape {
            Some(SubagentShape::OneShot) => self.flushed_seq,
            Some(SubagentShape::Continuable) | None => self.flush(out),
        };
        out.push(EngineCommand::RunTurn {
            index,
            messages: inputs.into_iter().map(|(_, m)| m).collect(),
            request_ids,
            after_seq,
        });
    }

    pub(super) fn replied(&mut self, text: String, reply: ReplyTo, out: &mut Vec<EngineCommand>) {
        self.last_assistant = Some(text.clone());
        self.record(JournalEvent::TurnAssistant { text }, out);
        out.push(EngineCommand::Answer {
            reply,
            answer: Answer::Done,
            after_seq: self.flushed_seq,
        });
    }

    /// M1: logged with its outbox seq (durable first), then published; a top-level session
    /// has no parent to report to.
    pub(super) fn report(
        &mut self,
        content: String,
        delivery: Delivery,
        reply: ReplyTo,
        out: &mut Vec<EngineCommand>,
        now_ms: u64,
    ) {
        let Some(parent) = self.parent.clone() else {
            out.push(self.answer(
                reply,
                Answer::Refused(format!(
                    "session {} is top level and has no parent to report to",
                    self.session
                )),
            ));
            return;
        };
        self.outbox_seq += 1;
        let seq = self.outbox_seq;
        self.stage(
            JournalEvent::ReportSent {
                seq,
                content: content.clone(),
                delivery,
            },
            out,
        );
        let after_seq = self.flush(out);
        out.push(EngineCommand::PublishReport {
            report: SubagentReport {
                sender_session_id: self.session.clone(),
                parent_session_id: parent,
                seq,
                content,
                delivery,
                at_ms: now_ms,
            },
            after_seq,
        });
        out.push(EngineCommand::Answer {
            reply,
            answer: Answer::Done,
            after_seq,
        });
    }

    /// A spawn the turn asks for (T5 first): a call the cut-short turn made (same fingerprint),
    /// asked for again before a later turn that spawned has ended, is answered with its child,
    /// once, if that child can answer: a continuable child (alive
    /// or settled, its messages reach the inbox), or a one-shot child whose result is in the
    /// log. Otherwise a birth: what the turn staged is durable before it is visible to others.
    pub(super) fn spawn(
        &mut self,
        reply: ReplyTo,
        call: Option<String>,
        out: &mut Vec<EngineCommand>,
    ) {
        self.spawn_asked = true;
        let repeat = call.as_ref().and_then(|c| {
            self.lost_spawns
                .iter()
                .position(|l| &l.call == c && l.answerable())
        });
        if let Some(at) = repeat {
            let lost = self.lost_spawns.remove(at);
            out.push(EngineCommand::Answer {
                reply,
                answer: Answer::Born {
                    child: lost.child,
                    result: lost.result,
                },
                after_seq: self.flushed_seq,
            });
            return;
        }
        if let Some(call) = call {
            self.calls.insert(reply, call);
        }
        let after_seq = self.flush(out);
        out.push(EngineCommand::BeforeBirth { after_seq });
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn child_born(
        &mut self,
        child: SessionId,
        shape: SubagentShape,
        node: NodeId,
        run: Option<RunId>,
        result: Option<Value>,
        reply: ReplyTo,
        out: &mut Vec<EngineCommand>,
        now_ms: u64,
    ) {
        self.children.insert(child.clone());
        match shape {
            SubagentShape::Continuable => {
                self.unsettled.insert(child.clone());
                self.feed(ActivationEvent::ChildAdopted(child.clone()), out, now_ms)
            }
            SubagentShape::OneShot => {}
        }
        let spawned = JournalEvent::Spawned {
            child: child.clone(),
            shape,
            node,
            run,
            call: self.calls.remove(&reply),
        };
        // One append for the birth and a one-shot child's result, durable before the answer.
        match &result {
            Some(result) => {
                self.stage(spawned, out);
                self.record(
                    JournalEvent::ChildResult {
                        child: child.clone(),
                        result: result.clone(),
                    },
                    out,
                );
            }
            None => {
                self.record(spawned, out);
            }
        }
        out.push(EngineCommand::Answer {
            reply,
            answer: Answer::Born { child, result },
            after_seq: self.flushed_seq,
        });
    }

    pub(super) fn birth_refused(
        &mut self,
        error: String,
        reply: ReplyTo,
        out: &mut Vec<EngineCommand>,
    ) {
        self.calls.remove(&reply);
        self.record(
            JournalEvent::SpawnRefused {
                error: error.clone(),
            },
            out,
        );
        out.push(EngineCommand::Answer {
            reply,
            answer: Answer::Refused(error),
            after_seq: self.flushed_seq,
        });
    }

    /// The turn's end: a drain's stop makes a cut-short turn `disposed`; then the activation
    /// decides (another turn, waiting, settling); a top-level session takes the next waking
    /// message or goes idle. Whatever the turn left staged is written.
    pub(super) fn turn_ended(
        &mut self,
        outcome: TurnOutcome,
        out: &mut Vec<EngineCommand>,
        now_ms: u64,
    ) {
        if !self.stage_turn_end(outcome, out) {
            return;
        }
        // T5: the lost turn's calls may be repeated until the end of the first later turn that
        // asks for a spawn (a turn that only answers a notice does not use the window up).
        if std::mem::take(&mut self.spawn_asked) {
            self.lost_spawns.clear();
        }
        match self.activation {
            Some(_) => self.feed(
                ActivationEvent::TurnFinished {
                    stop_reason: Some(self.last_stop.as_str().to_owned()),
                },
                out,
                now_ms,
            ),
            None => {
                self.busy = false;
                if !self.wake.is_empty() {
                    self.busy = true;
                    self.want_turn(out);
                }
            }
        }
        self.flush(out);
    }

    /// The host is shutting down: the turn's end is written, nothing settles (the session stays
    /// resumable), and the agent leaves.
    pub(super) fn turn_abandoned(&mut self, outcome: TurnOutcome, out: &mut Vec<EngineCommand>) {
        self.stage_turn_end(outcome, out);
        self.flush(out);
        self.left = true;
        out.push(EngineCommand::Leave);
    }

    /// Stages `turn/end`; false when no turn ran (an explicit no-op).
    fn stage_turn_end(&mut self, outcome: TurnOutcome, out: &mut Vec<EngineCommand>) -> bool {
        let Some(index) = self.in_turn.take() else {
            return false;
        };
        let (mut stop, error) = match outcome {
            TurnOutcome::Completed => (StopReason::Completed, None),
            TurnOutcome::Failed(e) => (StopReason::Failed, Some(e)),
            TurnOutcome::Cancelled => (StopReason::Interrupted, None),
        };
        if let Some(forced) = self.forced_stop {
            if stop == StopReason::Interrupted {
                stop = forced;
            }
        }
        self.last_stop = stop;
        self.ended_turn = Some(stop);
        self.stage(
            JournalEvent::TurnEnd {
                index,
                stop_reason: stop,
                error,
            },
            out,
        );
        true
    }
}
