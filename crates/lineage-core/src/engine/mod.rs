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
//! Files: `event` (what it is fed: [`EngineEvent`], [`Arrival`]), `command` (what the engine returns: [`EngineCommand`], its [`Barrier`], the
//! [`Answer`]s), [`accept`] (messages in), [`turn`] (a turn and what it does), [`wait`] (a turn
//! waiting for its children), [`settle`] (the activation's decisions as commands), [`restore`]
//! (the fold), [`handoff`] (graceful shutdown), [`outbox`] (the outbox read back from a log, to
//! send again).

pub mod accept;
mod command;
mod event;
pub mod handoff;
pub mod outbox;
pub mod restore;
pub mod settle;
pub mod turn;
pub mod wait;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use command::{Answer, Barrier, EngineCommand, RecordedState};
pub use event::{Arrival, EngineEvent, TurnOutcome, WaitMode};

use crate::activation::Activation;
use crate::descriptor::SubagentShape;
use crate::ids::SessionId;
use crate::journal::{JournalEvent, TurnMessage};
use crate::messages::{StopReason, SubagentSettled};

/// Who is waiting for an answer: an id the executor chose when it sent the event.
pub type ReplyTo = u64;

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
    /// What wakes it into a turn ([`WakeOn`]).
    pub wake_on: WakeOn,
}

/// What wakes an idle agent into a turn.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeOn {
    /// A followup, a child's settlement notice or a `wakeup` report (the seed's rule).
    #[default]
    Every,
    /// A user's message only: a child's reports and settlement notices are accepted and wait
    /// for the next prompt's turn (an editor's root: no turn runs that no prompt asked for).
    Prompts,
}

impl WakeOn {
    /// Whether `message`, sent waking, wakes an agent with this rule.
    pub fn wakes(self, message: &TurnMessage) -> bool {
        match (self, message) {
            (WakeOn::Every, _) | (WakeOn::Prompts, TurnMessage::User { .. }) => true,
            (
                WakeOn::Prompts,
                TurnMessage::SubagentReport { .. } | TurnMessage::SubagentSettled { .. },
            ) => false,
        }
    }
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

/// The changes after `snapshot` is logged: the first is the base.
pub(super) fn workspace_after(
    before: Option<crate::workspace::WorkspaceChanges>,
    snapshot: &crate::workspace::WorkspaceSnapshot,
) -> crate::workspace::WorkspaceChanges {
    let base = before.map_or_else(|| snapshot.clone(), |w| w.base);
    crate::workspace::WorkspaceChanges::new(base, snapshot.clone())
}

/// One live agent's state.
#[derive(Debug, Clone)]
pub struct AgentEngine {
    session: SessionId,
    parent: Option<SessionId>,
    shape: Option<SubagentShape>,
    label: Option<String>,
    descriptor_pending: bool,
    wake_on: WakeOn,
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
    /// Its files' changes against its base, as its log names them (issue 39): what its
    /// settlement carries.
    workspace: Option<crate::workspace::WorkspaceChanges>,
    /// The seq the next staged event gets.
    next_seq: u64,
    /// The last seq a Flush covers (as far as the commands returned so far go).
    flushed_seq: u64,
}

impl AgentEngine {
    /// Its files' changes against its base, when it has a workspace (issue 39).
    pub fn workspace_changes(&self) -> Option<&crate::workspace::WorkspaceChanges> {
        self.workspace.as_ref()
    }

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
            EngineEvent::WorkspaceSaved(snapshot) => {
                self.workspace = Some(workspace_after(self.workspace.take(), &snapshot));
                self.stage(JournalEvent::WorkspaceSnapshot(snapshot), &mut out);
            }
            EngineEvent::DriverState(state) => {
                self.stage(JournalEvent::DriverState(state), &mut out);
            }
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
            | EngineEvent::HandOff
            | EngineEvent::WorkspaceSaved(_)
            | EngineEvent::DriverState(_) => {}
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
mod driver_state_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wake_tests;
