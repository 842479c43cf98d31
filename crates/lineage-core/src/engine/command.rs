//! What the engine returns: [`EngineCommand`]s, in order, each with its durability condition
//! ([`Barrier`], [`EngineCommand::barrier`]); the [`Answer`]s it gives whoever waits, and the
//! states it asks the registry to record ([`RecordedState`]).

use serde_json::Value;

use super::ReplyTo;
use crate::ids::SessionId;
use crate::journal::{JournalEvent, TurnMessage};
use crate::messages::{StopReason, SubagentReport, SubagentSettled};

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
        /// The child's changes against the files it started from, when it has a workspace.
        changes: Option<Box<crate::workspace::WorkspaceChanges>>,
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
