//! A running turn waits for its children (M1, M2, S3; H1: actions during a turn).
//!
//! Children's reports and settlements are accepted into the log whether or not a turn runs
//! ([`super::accept`]) and normally wake a later turn. A turn may instead wait for them and
//! receive them itself: [`EngineEvent::WaitChildren`](super::EngineEvent::WaitChildren) with
//!
//! - `all`: until every child waited for has settled (the named ones, or every continuable
//!   child not yet settled when none is named; a child already settled counts as done);
//! - `any`: until at least one report or settlement from them is queued.
//!
//! When the wait is over (at once, if it already is), every queued report and settlement from
//! the children waited for (from any child when none is named) becomes an input of the running
//! turn: `turn/inputs` with their log seqs and a `turn/user` each, durable (for a resumable
//! session) before the answer [`Answer::Arrived`], so a resume never hands them to a turn
//! again. A waking message taken this way needs no turn of its own. If the executor's deadline
//! passes first ([`EngineEvent::WaitExpired`](super::EngineEvent::WaitExpired)), what arrived is
//! the answer, marked not complete. One wait at a time; a turn that ends first refuses it.

use std::collections::BTreeSet;

use crate::activation::ActivationEvent;
use crate::descriptor::SubagentShape;
use crate::ids::SessionId;
use crate::journal::{JournalEvent, TurnMessage};

use super::{AgentEngine, Answer, EngineCommand, ReplyTo, WaitMode};

/// A turn's wait for its children, until it is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingWait {
    reply: ReplyTo,
    /// The children named; `None`: every child.
    from: Option<BTreeSet<SessionId>>,
    mode: WaitMode,
    /// `all`: the children whose settlement is awaited.
    settling: BTreeSet<SessionId>,
}

/// The child a report or settlement comes from (`None` for a user message).
fn sender(message: &TurnMessage) -> Option<&SessionId> {
    match message {
        TurnMessage::User { .. } => None,
        TurnMessage::SubagentReport {
            sender_session_id, ..
        }
        | TurnMessage::SubagentSettled {
            sender_session_id, ..
        } => Some(sender_session_id),
    }
}

impl PendingWait {
    fn wants(&self, message: &TurnMessage) -> bool {
        match (sender(message), &self.from) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(child), Some(from)) => from.contains(child),
        }
    }
}

impl AgentEngine {
    pub(super) fn wait_children(
        &mut self,
        children: Option<Vec<SessionId>>,
        mode: WaitMode,
        reply: ReplyTo,
        out: &mut Vec<EngineCommand>,
        now_ms: u64,
    ) {
        let refusal = match (self.in_turn, &self.wait, &children) {
            (None, _, _) => Some("no turn runs: a wait for children happens during a turn".into()),
            (Some(_), Some(_), _) => {
                Some("a wait for children is already in progress in this turn; wait for it".into())
            }
            (Some(_), None, Some(named)) => named.iter().find_map(|c| self.check_child(c).err()),
            (Some(_), None, None) => None,
        };
        if let Some(refusal) = refusal {
            out.push(self.answer(reply, Answer::Refused(refusal)));
            return;
        }
        let from: Option<BTreeSet<SessionId>> = children.map(|c| c.into_iter().collect());
        let settling = match &from {
            Some(named) => named.intersection(&self.unsettled).cloned().collect(),
            None => self.unsettled.clone(),
        };
        self.wait = Some(PendingWait {
            reply,
            from,
            mode,
            settling,
        });
        self.check_wait(out, now_ms);
    }

    /// After a message was queued (or the wait began): answers the wait if it is over.
    pub(super) fn check_wait(&mut self, out: &mut Vec<EngineCommand>, now_ms: u64) {
        let over = match &self.wait {
            None => false,
            Some(w) => match w.mode {
                WaitMode::All => w.settling.iter().all(|c| !self.unsettled.contains(c)),
                WaitMode::Any => self
                    .wake
                    .iter()
                    .chain(self.quiet.iter())
                    .any(|(_, m)| w.wants(m)),
            },
        };
        if over {
            self.finish_wait(true, out, now_ms);
        }
    }

    /// The executor's deadline for the wait `reply` passed.
    pub(super) fn wait_expired(
        &mut self,
        reply: ReplyTo,
        out: &mut Vec<EngineCommand>,
        now_ms: u64,
    ) {
        if self.wait.as_ref().is_some_and(|w| w.reply == reply) {
            self.finish_wait(false, out, now_ms);
        }
    }

    /// The turn ended with a wait still pending: refused (nobody reads it any more).
    pub(super) fn end_wait(&mut self, out: &mut Vec<EngineCommand>) {
        if let Some(w) = self.wait.take() {
            out.push(self.answer(
                w.reply,
                Answer::Refused("the turn ended before the wait for children did".into()),
            ));
        }
    }

    /// Hands the queued messages the wait wants to the running turn and answers it.
    fn finish_wait(&mut self, complete: bool, out: &mut Vec<EngineCommand>, now_ms: u64) {
        let (Some(w), Some(index)) = (self.wait.take(), self.in_turn) else {
            return;
        };
        let mut taken: Vec<(u64, TurnMessage)> = Vec::new();
        let mut woke = 0usize;
        let mut keep = std::collections::VecDeque::new();
        for (seq, m) in std::mem::take(&mut self.wake) {
            match w.wants(&m) {
                true => {
                    woke += 1;
                    taken.push((seq, m));
                }
                false => keep.push_back((seq, m)),
            }
        }
        self.wake = keep;
        let (wanted, quiet): (Vec<_>, Vec<_>) = std::mem::take(&mut self.quiet)
            .into_iter()
            .partition(|(_, m)| w.wants(m));
        self.quiet = quiet;
        taken.extend(wanted);
        taken.sort_by_key(|(seq, _)| *seq);
        for _ in 0..woke {
            self.feed(ActivationEvent::MessageTaken, out, now_ms);
        }
        if !taken.is_empty() {
            self.stage(
                JournalEvent::TurnInputs {
                    index,
                    inputs: taken.iter().map(|(seq, _)| *seq).collect(),
                },
                out,
            );
            for (_, message) in &taken {
                self.stage(
                    JournalEvent::TurnUser {
                        text: message.render(),
                    },
                    out,
                );
            }
        }
        let after_seq = match self.shape {
            Some(SubagentShape::OneShot) => self.flushed_seq,
            Some(SubagentShape::Continuable) | None => self.flush(out),
        };
        out.push(EngineCommand::Answer {
            reply: w.reply,
            answer: Answer::Arrived {
                messages: taken.into_iter().map(|(_, m)| m).collect(),
                complete,
            },
            after_seq,
        });
    }
}
