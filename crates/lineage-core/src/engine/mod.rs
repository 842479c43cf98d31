//! The agent engine: the rules of one live agent as a state machine that returns commands
//! (X2, M1–M4, S1), like openraft's `Engine` and raft-rs's `Ready`.
//!
//! The host's agent task owns the driver, the NATS ports and the registry client; it feeds an
//! [`AgentEngine`] what happened ([`EngineEvent`]) and executes the [`EngineCommand`]s it
//! returns, **in order**. The engine never does I/O, never reads a clock (the time comes with
//! each event) and never mints ids.
//!
//! Durability is data. The engine tracks the log sequence numbers it stages
//! ([`EngineCommand::Stage`]) and says when they must be durable: a [`EngineCommand::Flush`]
//! makes everything staged so far durable (one append), and every command that lets the world
//! see an effect comes after the flush it depends on and names it (`after_seq`, read as a
//! [`Barrier`] by [`EngineCommand::barrier`]), so an executor checks it: an answer that a
//! message is accepted (or a duplicate: once the original is durable too), a report publish,
//! a child's birth ([`EngineCommand::BeforeBirth`]), the settlement commit. The settlement notice is published
//! only after [`EngineCommand::CommitSettlement`]; if the commit fails, the executor drops the
//! commands after it (the agent stops, resumable, and nobody was told).
//!
//! The rules that live here (and nowhere in the host):
//! - accept once: a message whose dedup id the log holds is a duplicate (answered, not logged);
//!   a settled agent takes no message (the sender resumes it);
//! - a top-level session has no activation: a waking message takes a turn, and it never
//!   settles (only a drain ends it, as a release);
//! - turns: one waking message plus every quiet one, oldest first; a turn's start and inputs
//!   are durable before the driver runs for a resumable session; a one-shot run (never resumed)
//!   writes its turn as one message at its barriers;
//! - a drain stop or release turns the `interrupted` of the turn it cut short into `disposed`;
//! - a one-shot run settles as a dispose; a continuable child captures its notice (outbox seq,
//!   summary) at settlement, durable with the commit's flush;
//! - a turn the log shows started but never ended was cut short by the loss of its node: a
//!   resume closes it as `interrupted` ([`restore`]);
//! - restore from a log is a pure fold ([`restore::fold`]).
//!
//! - a running turn may wait for its children and receive their reports and settlements in
//!   the turn (`turn/inputs`), instead of in a later turn ([`wait`]).
//!
//! - graceful shutdown: a quiesced agent takes no new turn; an idle one hands off (leaves
//!   unsettled, for another node to resume with nothing cut short) ([`handoff`]).
//!
//! Files: [`accept`] (messages in), [`turn`] (a turn and what it does), [`wait`] (a turn
//! waiting for its children), [`settle`] (the activation's decisions as commands), [`restore`]
//! (the fold), [`handoff`] (graceful shutdown), [`outbox`] (the outbox read back from a log, to
//! send again).

pub mod accept;
pub mod handoff;
pub mod outbox;
pub mod restore;
pub mod settle;
pub mod turn;
pub mod wait;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::activation::Activation;
use crate::descriptor::SubagentShape;
use crate::ids::{NodeId, RunId, SessionId};
use crate::journal::{JournalEvent, TurnMessage};
use crate::messages::{Delivery, StopReason, SubagentReport, SubagentSettled};

/// Who is waiting for an answer: an id the executor chose when it sent the event.
pub type ReplyTo = u64;

/// A message arriving at the agent (a followup, or a child's report or settlement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The message.
    pub message: TurnMessage,
    /// Whether it wakes the agent.
    pub wake: bool,
    /// An inbox message's dedup id: accepted at most once under it.
    pub dedup_id: Option<String>,
    /// A followup's request id: a retry with the same id is recognised (M3).
    pub request_id: Option<String>,
    /// A settlement notice: the child that settled (an owned child is gone).
    pub settled_child: Option<SessionId>,
}

/// What a wait for children waits for.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitMode {
    /// Every child waited for settled.
    #[default]
    All,
    /// At least one report or settlement arrived.
    Any,
}

/// How a turn's driver call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The driver finished the turn.
    Completed,
    /// The driver (or an action it asked for) failed, with a one-line reason.
    Failed(String),
    /// The turn was cancelled (interrupt, drain, shutdown).
    Cancelled,
}

/// What happened, as the executor reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    /// A message to accept (log first, then answer).
    Deliver {
        /// The message.
        arrival: Arrival,
        /// Who waits for the answer.
        reply: ReplyTo,
    },
    /// A child spawned on this agent's behalf, not from its own turn.
    Adopt(SessionId),
    /// Drain: take no more turns (a running turn is cancelled and ends with this reason:
    /// `disposed` for a drain, `deadline` for the deadline sweeper's, Q2).
    Stop(StopReason),
    /// Drain wave: settle with this reason (`disposed`, or `deadline`) and leave; owned
    /// children are gone already.
    Release(StopReason),
    /// Re-adoption: decide as if the last turn had just ended.
    Recover,
    /// The executor is ready to run the turn it was told to take ([`EngineCommand::TakeTurn`]).
    BeginTurn,
    /// During a turn: the driver replied.
    Replied {
        /// The text.
        text: String,
        /// Who waits.
        reply: ReplyTo,
    },
    /// During a turn: the driver reports to the parent (M1).
    Report {
        /// The text.
        content: String,
        /// quiet or wakeup.
        delivery: Delivery,
        /// Who waits.
        reply: ReplyTo,
    },
    /// During a turn: the driver asks for a child; the executor runs the birth after the
    /// [`EngineCommand::BeforeBirth`] barrier and reports [`EngineEvent::ChildBorn`] or
    /// [`EngineEvent::BirthRefused`].
    Spawn {
        /// Who waits.
        reply: ReplyTo,
        /// The call's fingerprint (the spec it asks for, [`call_fingerprint`]): a spawn the
        /// turn cut short by a lost node made is not made again by the next turn (T5).
        call: Option<String>,
    },
    /// A birth this agent asked for succeeded (a one-shot one with its result).
    ChildBorn {
        /// The child.
        child: SessionId,
        /// Its shape.
        shape: SubagentShape,
        /// Where it runs.
        node: NodeId,
        /// Its run.
        run: Option<RunId>,
        /// A one-shot child's result, as JSON.
        result: Option<Value>,
        /// Who waits.
        reply: ReplyTo,
    },
    /// A birth this agent asked for was refused.
    BirthRefused {
        /// Why, one line.
        error: String,
        /// Who waits.
        reply: ReplyTo,
    },
    /// During a turn: wait for children's reports and settlements, received in this turn
    /// ([`wait`]). Answered [`Answer::Arrived`] once the wait is over, or refused.
    WaitChildren {
        /// The children; every continuable child not yet settled when `None`.
        children: Option<Vec<SessionId>>,
        /// All settled, or any message.
        mode: WaitMode,
        /// Who waits.
        reply: ReplyTo,
    },
    /// The executor's deadline for the wait answered to `reply` passed: what arrived is the
    /// answer (not complete). No such wait: no-op.
    WaitExpired {
        /// The wait's reply id.
        reply: ReplyTo,
    },
    /// A followup this agent sent to its child was delivered: the child is not settled any
    /// more (a later wait waits for it again). Unknown child: no-op.
    ChildFollowedUp(SessionId),
    /// The turn's driver call ended.
    TurnEnded(TurnOutcome),
    /// The host shuts down while a turn ran: its end is written, nothing settles.
    TurnAbandoned(TurnOutcome),
    /// Graceful shutdown: the host winds down; no new turn starts here (a running one goes on
    /// to its end). A one-shot run is not quiesced ([`handoff`]).
    Quiesce,
    /// Graceful shutdown: leave without settling, when no turn runs, so another node resumes
    /// the session with nothing cut short ([`EngineCommand::HandOff`]); a no-op during a turn.
    HandOff,
}

/// An answer to whoever waits ([`ReplyTo`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Accepted into the log (durable).
    Accepted,
    /// Already accepted before under its dedup id: nothing was added.
    Duplicate,
    /// The agent settled and takes no message: resume it (M3).
    NotLive,
    /// The action was done (a reply recorded, a report sent).
    Done,
    /// A child was born.
    Born {
        /// The child.
        child: SessionId,
        /// A one-shot child's result.
        result: Option<Value>,
    },
    /// A wait for children is over: what arrived from them (oldest first), and whether what
    /// it waited for happened (false: its deadline passed first).
    Arrived {
        /// The messages, now inputs of this turn.
        messages: Vec<TurnMessage>,
        /// False when the deadline passed first.
        complete: bool,
    },
    /// Refused, one line.
    Refused(String),
}

/// A registry state an agent records about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordedState {
    /// Taking turns again.
    Running,
    /// Idle, owned children remain.
    Waiting,
}

/// What to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineCommand {
    /// Append `event` to the in-memory log at `seq`; durable with the next [`EngineCommand::Flush`].
    Stage {
        /// Its log sequence number.
        seq: u64,
        /// The event.
        event: JournalEvent,
    },
    /// One-shot, first pre-step: the descriptor goes into the log now (P1), at `seq`.
    StageDescriptor {
        /// Its log sequence number.
        seq: u64,
    },
    /// Make everything staged durable (one append). On failure the executor stops executing
    /// this list; what is staged stays staged.
    Flush,
    /// Answer whoever waits; everything it depends on is durable through `after_seq`.
    Answer {
        /// Who.
        reply: ReplyTo,
        /// What.
        answer: Answer,
        /// The log is durable through this seq (0: depends on nothing).
        after_seq: u64,
    },
    /// Take a turn: the executor sends [`EngineEvent::BeginTurn`] when it is ready.
    TakeTurn,
    /// Run the driver on these inputs (the turn's start is staged, and durable through
    /// `after_seq` for a resumable session).
    RunTurn {
        /// The turn's index.
        index: u64,
        /// Its input messages, oldest first.
        messages: Vec<TurnMessage>,
        /// The request ids of the followups among them (an ACP front door waits for the turn
        /// that took its prompt).
        request_ids: Vec<String>,
        /// Durable through this seq.
        after_seq: u64,
    },
    /// Cancel the running turn.
    CancelTurn,
    /// Record this state in the registry (fenced by the agent's epoch; best effort).
    RecordState(RecordedState),
    /// Publish a report to the parent's inbox (its `outbox/report` is durable through
    /// `after_seq`).
    PublishReport {
        /// The report.
        report: SubagentReport,
        /// Durable through this seq.
        after_seq: u64,
    },
    /// A child is about to be born: the log is durable through `after_seq`; a one-shot run opens
    /// its inbox now (its children write to it).
    BeforeBirth {
        /// Durable through this seq.
        after_seq: u64,
    },
    /// Commit the settlement in the registry: `settled`, or for a one-shot run a dispose (one
    /// write). Everything staged is durable through `after_seq` first, or, with `with_log`,
    /// written at the same time as the commit; either way before any command after this one.
    /// If either fails the executor drops the rest of the list and stops the agent (never
    /// notify before the commit).
    CommitSettlement {
        /// One-shot: dispose in the same write.
        dispose: bool,
        /// The staged events through `after_seq` are written alongside the commit, not before
        /// it (a dispose: a disposed session's log is never read to resume it, so the commit
        /// need not wait for it; only whoever is told afterwards must).
        with_log: bool,
        /// The stop reason committed (for metrics and logs).
        stop_reason: StopReason,
        /// Durable through this seq.
        after_seq: u64,
    },
    /// Publish `subagent/end` (E1) for this agent's run, after the commit.
    PublishEnd {
        /// The stop reason.
        stop_reason: StopReason,
        /// The last assistant text.
        output: Option<String>,
    },
    /// Publish the settlement notice to the parent's inbox (M2), after the commit.
    PublishNotice(SubagentSettled),
    /// One-shot: give the result to the caller, after the commit.
    ReturnResult {
        /// The last assistant text.
        output: Option<String>,
        /// The stop reason.
        stop_reason: StopReason,
    },
    /// Graceful shutdown: the agent leaves unsettled, idle, with its log durable through
    /// `after_seq`; once it is gone the host releases its placement (any node resumes it at
    /// once, nothing was cut short). `pending_work`: a waking message waits for a turn.
    HandOff {
        /// A waking message waits for the next host's turn.
        pending_work: bool,
        /// Durable through this seq.
        after_seq: u64,
    },
    /// The agent is done: release the handle, stop the task.
    Leave,
}

/// What must hold before a command runs: its durability condition, as data (openraft's
/// `Respond { when }`, raft-rs's `persisted_messages`). The executor checks it for every
/// command ([`EngineCommand::barrier`]) and holds a command whose barrier is not durable (it
/// writes what is staged first, and does not run the command if that fails); it does not rely
/// on the order of the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Barrier {
    /// Runs at once (local bookkeeping, or it comes after a commit that has the say).
    None,
    /// Runs only once the log is durable through this seq (0: depends on nothing).
    DurableThrough(u64),
    /// Writes the log through this seq itself, alongside its own write (a one-shot dispose):
    /// nothing needs to be durable before it, everything after it waits for both.
    WrittenWith(u64),
}

impl EngineCommand {
    /// This command's durability condition.
    pub fn barrier(&self) -> Barrier {
        match self {
            EngineCommand::Answer { after_seq, .. }
            | EngineCommand::RunTurn { after_seq, .. }
            | EngineCommand::PublishReport { after_seq, .. }
            | EngineCommand::BeforeBirth { after_seq }
            | EngineCommand::HandOff { after_seq, .. } => Barrier::DurableThrough(*after_seq),
            EngineCommand::CommitSettlement {
                with_log: true,
                after_seq,
                ..
            } => Barrier::WrittenWith(*after_seq),
            EngineCommand::CommitSettlement {
                with_log: false,
                after_seq,
                ..
            } => Barrier::DurableThrough(*after_seq),
            EngineCommand::Stage { .. }
            | EngineCommand::StageDescriptor { .. }
            | EngineCommand::Flush
            | EngineCommand::TakeTurn
            | EngineCommand::CancelTurn
            | EngineCommand::RecordState(_)
            | EngineCommand::PublishEnd { .. }
            | EngineCommand::PublishNotice(_)
            | EngineCommand::ReturnResult { .. }
            | EngineCommand::Leave => Barrier::None,
        }
    }
}

/// Everything the engine needs to start (at birth or on resume): see [`restore::fold`] for
/// what a log adds.
#[derive(Debug, Clone)]
pub struct EngineInit {
    /// The session.
    pub session: SessionId,
    /// Its durable parent (none: top level).
    pub parent: Option<SessionId>,
    /// Its shape (none: top level).
    pub shape: Option<SubagentShape>,
    /// The descriptor's label (for the settlement summary).
    pub label: Option<String>,
    /// One-shot: the descriptor is not in the log yet and goes in at the first pre-step.
    pub descriptor_pending: bool,
}

/// The fingerprint of a spawn call: FNV-1a (64 bit) of its canonical JSON, in hex. Equal specs
/// (same agent, prompt, shape, label, ...) have equal fingerprints on every node.
pub fn call_fingerprint(spec_json: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in spec_json {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// One live agent's state.
#[derive(Debug, Clone)]
pub struct AgentEngine {
    session: SessionId,
    parent: Option<SessionId>,
    shape: Option<SubagentShape>,
    label: Option<String>,
    descriptor_pending: bool,
    activation: Option<Activation>,
    wake: VecDeque<(u64, TurnMessage)>,
    quiet: Vec<(u64, TurnMessage)>,
    /// The request ids of queued followups, by the seq of their `inbox/accepted`: a turn
    /// names the followups it took ([`EngineCommand::RunTurn`]).
    requests: BTreeMap<u64, String>,
    /// Top level: a turn runs or is due.
    busy: bool,
    /// The executor was told to take a turn and has not begun it.
    turn_due: bool,
    /// The index of the turn that runs.
    in_turn: Option<u64>,
    turn_index: u64,
    outbox_seq: u64,
    accepted: BTreeSet<String>,
    last_assistant: Option<String>,
    last_stop: StopReason,
    forced_stop: Option<StopReason>,
    recorded_waiting: bool,
    /// The stop reason of the last `turn/end` in the log.
    ended_turn: Option<StopReason>,
    /// The settlement's stop reason, once captured.
    captured_stop: Option<StopReason>,
    /// A continuable child's notice, captured and waiting for the commit.
    notice: Option<SubagentSettled>,
    left: bool,
    /// Every child this agent spawned or adopted.
    children: BTreeSet<SessionId>,
    /// Continuable children whose settlement has not arrived since their birth or last
    /// followup.
    unsettled: BTreeSet<SessionId>,
    /// The last report each child sent.
    last_reports: BTreeMap<SessionId, String>,
    /// The turn's wait for children, if one is pending.
    wait: Option<wait::PendingWait>,
    /// T5: the spawns of the turn a lost node cut short (restored), answered again instead of
    /// born again when a later turn asks for the same call; cleared when the first later turn
    /// that asked for any spawn ends (turns that spawn nothing, say one answering a child's
    /// notice, leave them).
    lost_spawns: Vec<turn::LostSpawn>,
    /// Whether the running turn asked for a spawn (T5: its end clears `lost_spawns`).
    spawn_asked: bool,
    /// The call fingerprints of births in flight, by who waits (recorded with the birth).
    calls: BTreeMap<ReplyTo, String>,
    /// The host winds down: no new turn starts here ([`handoff`]).
    quiesced: bool,
    /// The seq the next staged event gets.
    next_seq: u64,
    /// The last seq a Flush covers (as far as the commands returned so far go).
    flushed_seq: u64,
}

impl AgentEngine {
    /// The session.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// Its shape (none: top level).
    pub fn shape(&self) -> Option<SubagentShape> {
        self.shape
    }

    /// Whether a turn runs now.
    pub fn in_turn(&self) -> bool {
        self.in_turn.is_some()
    }

    /// Whether the agent left (settled or released).
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// The last assistant text.
    pub fn last_assistant(&self) -> Option<&str> {
        self.last_assistant.as_deref()
    }

    /// The stop reason of the last turn.
    pub fn last_stop(&self) -> StopReason {
        self.last_stop
    }

    /// The index the next turn gets.
    pub fn next_turn_index(&self) -> u64 {
        self.turn_index
    }

    /// Children owned here that have not settled.
    pub fn owned_children(&self) -> Vec<SessionId> {
        self.activation
            .as_ref()
            .map(|a| a.owned_children().iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every child this agent spawned or adopted, sorted.
    pub fn children(&self) -> &BTreeSet<SessionId> {
        &self.children
    }

    /// The last report `child` sent, if any arrived.
    pub fn last_report(&self, child: &SessionId) -> Option<&str> {
        self.last_reports.get(child).map(String::as_str)
    }

    /// `Err` with the one-line refusal when `child` is not a child of this agent.
    pub fn check_child(&self, child: &SessionId) -> Result<(), String> {
        match self.children.contains(child) {
            true => Ok(()),
            false => Err(format!(
                "session {child} is not a child of session {}; list_children shows yours",
                self.session
            )),
        }
    }

    /// Whether `dedup_id` was accepted.
    pub fn has_accepted(&self, dedup_id: &str) -> bool {
        self.accepted.contains(dedup_id)
    }

    /// The log seq of the waking message the next turn takes.
    pub fn next_wake_seq(&self) -> Option<u64> {
        self.wake.front().map(|(seq, _)| *seq)
    }

    /// Messages waiting for a turn: (waking, quiet).
    pub fn pending(&self) -> (usize, usize) {
        (self.wake.len(), self.quiet.len())
    }

    /// Handles one event; `now_ms` is the executor's clock.
    pub fn handle(&mut self, event: EngineEvent, now_ms: u64) -> Vec<EngineCommand> {
        let mut out = Vec::new();
        if self.left {
            self.after_leaving(event, &mut out);
            return out;
        }
        match event {
            EngineEvent::Deliver { arrival, reply } => {
                self.deliver(arrival, reply, &mut out, now_ms)
            }
            EngineEvent::Adopt(child) => self.adopt(child, &mut out, now_ms),
            EngineEvent::Stop(reason) => self.stop(reason, &mut out, now_ms),
            EngineEvent::Release(reason) => self.release(reason, &mut out, now_ms),
            EngineEvent::Recover => self.recover(&mut out, now_ms),
            EngineEvent::BeginTurn => self.begin_turn(&mut out, now_ms),
            EngineEvent::Replied { text, reply } => self.replied(text, reply, &mut out),
            EngineEvent::Report {
                content,
                delivery,
                reply,
            } => self.report(content, delivery, reply, &mut out, now_ms),
            EngineEvent::Spawn { reply, call } => self.spawn(reply, call, &mut out),
            EngineEvent::ChildBorn {
                child,
                shape,
                node,
                run,
                result,
                reply,
            } => self.child_born(child, shape, node, run, result, reply, &mut out, now_ms),
            EngineEvent::BirthRefused { error, reply } => {
                self.birth_refused(error, reply, &mut out)
            }
            EngineEvent::WaitChildren {
                children,
                mode,
                reply,
            } => self.wait_children(children, mode, reply, &mut out, now_ms),
            EngineEvent::WaitExpired { reply } => self.wait_expired(reply, &mut out, now_ms),
            EngineEvent::ChildFollowedUp(child) => {
                if self.children.contains(&child) {
                    self.unsettled.insert(child);
                }
            }
            EngineEvent::TurnEnded(outcome) => {
                self.end_wait(&mut out);
                self.turn_ended(outcome, &mut out, now_ms)
            }
            EngineEvent::TurnAbandoned(outcome) => {
                self.end_wait(&mut out);
                self.turn_abandoned(outcome, &mut out)
            }
            EngineEvent::Quiesce => self.quiesce(),
            EngineEvent::HandOff => self.hand_off(&mut out),
        }
        out
    }

    /// After the agent left, every event has an explicit outcome: a message is refused (the
    /// sender resumes the session), an action is refused, the rest is nothing to do.
    fn after_leaving(&mut self, event: EngineEvent, out: &mut Vec<EngineCommand>) {
        match event {
            EngineEvent::Deliver { reply, .. } => out.push(self.answer(reply, Answer::NotLive)),
            EngineEvent::Replied { reply, .. }
            | EngineEvent::Report { reply, .. }
            | EngineEvent::Spawn { reply, .. }
            | EngineEvent::BirthRefused { reply, .. }
            | EngineEvent::WaitChildren { reply, .. }
            | EngineEvent::ChildBorn { reply, .. } => out.push(self.answer(
                reply,
                Answer::Refused(format!("session {} has settled", self.session)),
            )),
            EngineEvent::Adopt(_)
            | EngineEvent::WaitExpired { .. }
            | EngineEvent::ChildFollowedUp(_)
            | EngineEvent::Stop(_)
            | EngineEvent::Release(_)
            | EngineEvent::Recover
            | EngineEvent::BeginTurn
            | EngineEvent::TurnEnded(_)
            | EngineEvent::TurnAbandoned(_)
            | EngineEvent::Quiesce
            | EngineEvent::HandOff => {}
        }
    }

    /// Stages `event` at the next seq.
    fn stage(&mut self, event: JournalEvent, out: &mut Vec<EngineCommand>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        out.push(EngineCommand::Stage { seq, event });
        seq
    }

    /// A barrier: everything staged becomes durable.
    fn flush(&mut self, out: &mut Vec<EngineCommand>) -> u64 {
        let last = self.next_seq - 1;
        if self.flushed_seq < last {
            out.push(EngineCommand::Flush);
            self.flushed_seq = last;
        }
        self.flushed_seq
    }

    /// Everything staged, to be written by the command that follows (which names it), not by
    /// a `Flush` of its own.
    fn write_alongside(&mut self) -> u64 {
        self.flushed_seq = self.next_seq - 1;
        self.flushed_seq
    }

    /// Durable now for a resumable session; staged only for a one-shot run (written at its
    /// next barrier or at the end of its turn).
    fn record(&mut self, event: JournalEvent, out: &mut Vec<EngineCommand>) -> u64 {
        let seq = self.stage(event, out);
        match self.shape {
            Some(SubagentShape::OneShot) => {}
            Some(SubagentShape::Continuable) | None => {
                self.flush(out);
            }
        }
        seq
    }

    fn answer(&self, reply: ReplyTo, answer: Answer) -> EngineCommand {
        EngineCommand::Answer {
            reply,
            answer,
            after_seq: 0,
        }
    }
}

#[cfg(test)]
mod tests;
