//! What the engine is fed: [`EngineEvent`]s (what happened, with the time), the [`Arrival`]
//! of a message, how a turn ended ([`TurnOutcome`]) and how a turn waits for its children
//! ([`WaitMode`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ReplyTo;
use crate::descriptor::SubagentShape;
use crate::ids::{NodeId, RunId, SessionId};
use crate::journal::TurnMessage;
use crate::messages::{Delivery, StopReason};

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

impl TurnOutcome {
    /// The outcome once the turn's files were checkpointed (issue 39): a turn whose files
    /// could not be stored (`Err`, one line) does not end as completed; a failed or
    /// cancelled turn keeps its own reason.
    pub fn with_checkpoint(self, checkpoint: Result<(), String>) -> TurnOutcome {
        match (checkpoint, self) {
            (Err(reason), TurnOutcome::Completed) => TurnOutcome::Failed(reason),
            (_, outcome) => outcome,
        }
    }
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
    /// The session's files were stored as this snapshot (a checkpoint at its turn's end, issue
    /// 39): staged, written with the `turn/end` that follows.
    WorkspaceSaved(crate::workspace::WorkspaceSnapshot),
    /// The driver's state of its agent changed in the turn that is ending (an A2A agent's
    /// remote task): staged, written with the `turn/end` that follows, read back at a resume.
    DriverState(serde_json::Value),
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
