//! Messages in (M1–M3): accept once, into the log first, then answer; and adoption.
//!
//! A message is accepted whether or not a turn runs: it is logged as `inbox/accepted`, made
//! durable, answered at once, and queued for the next turn (a waking one wakes an idle agent).
//! A dedup id seen before (an inbox redelivery, a retried followup) is answered `Duplicate` and
//! adds nothing; the answer waits until the log is durable through what is staged (the
//! original may still be staged in a one-shot run). A settled agent answers `NotLive`: the sender resumes the session.

use crate::activation::{ActivationEvent, ActivationState};
use crate::ids::SessionId;
use crate::journal::{Accepted, JournalEvent, TurnMessage};

use super::{AgentEngine, Answer, Arrival, EngineCommand, ReplyTo};

impl AgentEngine {
    pub(super) fn deliver(
        &mut self,
        arrival: Arrival,
        reply: ReplyTo,
        out: &mut Vec<EngineCommand>,
        now_ms: u64,
    ) {
        let Arrival {
            message,
            wake,
            dedup_id,
            request_id,
            settled_child,
        } = arrival;
        // What does not wake this agent waits for its next turn (an editor's root: a prompt).
        let wake = wake && self.wake_on.wakes(&message);
        let record = Accepted {
            message,
            wake,
            dedup_id,
            request_id,
        };
        if record.once_keys().any(|k| self.accepted.contains(&k)) {
            // Acknowledged only once the original is durable too (a one-shot run may hold it
            // staged): whoever retried must be able to rely on it.
            let after_seq = self.flush(out);
            out.push(EngineCommand::Answer {
                reply,
                answer: Answer::Duplicate,
                after_seq,
            });
            return;
        }
        if let Some(act) = &self.activation {
            if act.state() == ActivationState::Settled {
                out.push(self.answer(reply, Answer::NotLive));
                return;
            }
        }
        self.accepted.extend(record.once_keys());
        let message = record.message.clone();
        let request_id = record.request_id.clone();
        let seq = self.stage(JournalEvent::Accepted(record), out);
        if let Some(id) = request_id {
            self.requests.insert(seq, id);
        }
        let after_seq = self.flush(out);
        out.push(EngineCommand::Answer {
            reply,
            answer: Answer::Accepted,
            after_seq,
        });
        if let TurnMessage::SubagentReport {
            sender_session_id,
            content,
        } = &message
        {
            self.last_reports
                .insert(sender_session_id.clone(), content.clone());
        }
        if wake {
            self.wake.push_back((seq, message));
            self.queued(out, now_ms);
        } else {
            self.quiet.push((seq, message));
        }
        if let Some(child) = settled_child {
            self.unsettled.remove(&child);
            self.feed(ActivationEvent::ChildDisposed(child), out, now_ms);
        }
        self.check_wait(out, now_ms);
    }

    /// A waking message was queued: the activation decides; a top-level session takes a turn
    /// when none runs or is due.
    pub(super) fn queued(&mut self, out: &mut Vec<EngineCommand>, now_ms: u64) {
        match self.activation {
            Some(_) => self.feed(ActivationEvent::MessageQueued, out, now_ms),
            None => {
                if !self.busy {
                    self.busy = true;
                    self.want_turn(out);
                }
            }
        }
    }

    pub(super) fn adopt(&mut self, child: SessionId, out: &mut Vec<EngineCommand>, now_ms: u64) {
        if self.children.insert(child.clone()) {
            self.unsettled.insert(child.clone());
        }
        self.feed(ActivationEvent::ChildAdopted(child), out, now_ms);
    }

    /// The executor should take a turn (once); a quiesced agent only notes that one is due
    /// (the next host takes it, [`super::handoff`]). A stopped agent (a drain or deadline
    /// closed it, X3) takes no turn ever again: what arrives is recorded, not acted on.
    pub(super) fn want_turn(&mut self, out: &mut Vec<EngineCommand>) {
        if self.forced_stop.is_some() {
            return;
        }
        if !self.turn_due {
            self.turn_due = true;
            if !self.quiesced {
                out.push(EngineCommand::TakeTurn);
            }
        }
    }
}
