//! The activation of one continuable child: `running -> waiting -> settled` (X2, seed §3.2, §7.2).
//!
//! An [`Activation`] is a pure state machine. The host feeds it what happened
//! ([`ActivationEvent`]) and executes what it returns ([`ActivationAction`]), in order. It holds
//! only ids and counters, never the agent itself, and it never reads a clock.
//!
//! The rules:
//!
//! - **running -> waiting**: the agent loop is idle, the inbox is empty, no accepted turn is
//!   pending, but owned children remain. The machine emits [`ActivationAction::EnterWaiting`].
//! - **waiting -> settled**: the last owned child is disposed.
//! - **running -> settled**: the loop is idle with nothing pending and no owned children.
//! - **waiting -> running**: a message arrives; the machine emits [`ActivationAction::StartTurn`].
//! - Settling emits, in exactly this order: [`ActivationAction::CaptureResult`],
//!   [`ActivationAction::MarkTerminal`], [`ActivationAction::DisposeHandle`],
//!   [`ActivationAction::SettleObservers`], [`ActivationAction::DeliverSettlement`] (to the
//!   durable direct parent, which may live on another node, R2).
//!
//! The machine drives turns: the host's loop starts a turn only when told
//! ([`ActivationAction::StartTurn`]); from then until the loop reports
//! [`ActivationEvent::TurnFinished`] or [`ActivationEvent::Idle`] the activation counts as busy,
//! so a turn is never requested twice.
//!
//! Settlement is decided only when the loop reports that it is idle (`TurnFinished`, `Idle`),
//! when the last owned child of a waiting activation goes (`ChildDisposed`), or on `Stop`. A
//! freshly materialized activation, idle before its first message, therefore never settles by
//! accident.
//!
//! Duplicates and late events never panic. Each event documents its outcome after settlement:
//! an empty action list is the explicit idempotent outcome ("nothing to do"); an event that
//! would lose work (a message, a new child) is refused with [`CoreError::IllegalTransition`]
//! so the host cold-resumes a fresh activation instead.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::ids::SessionId;

/// The three states of an activation (X2). Wire names: `running`, `waiting`, `settled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivationState {
    /// A turn runs, or input is pending, or the activation was just materialized.
    Running,
    /// Idle with nothing pending, but owned children remain.
    Waiting,
    /// Terminal: the result was captured and the settlement sent to the parent.
    Settled,
}

impl ActivationState {
    /// The wire name: `running`, `waiting` or `settled`.
    pub fn as_str(self) -> &'static str {
        match self {
            ActivationState::Running => "running",
            ActivationState::Waiting => "waiting",
            ActivationState::Settled => "settled",
        }
    }
}

/// What happened to the child, as reported by the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivationEvent {
    /// A message (followup, report or settlement from a grandchild) entered the child's inbox.
    ///
    /// Idle: starts a turn (and a waiting activation runs again). Busy: only queued. Stopping:
    /// only counted; no turn starts, the message stays in the durable inbox for a later resume.
    /// Settled: refused, because the message would be lost; cold-resume a new activation (M3).
    MessageQueued,
    /// The agent loop took one message out of the inbox for a turn. A message admitted
    /// directly, without passing the inbox, is fine too. Settled: refused.
    MessageAccepted,
    /// The agent loop started a turn. Waiting: running again. Stopping: the turn is cancelled
    /// at once (again on a duplicate; cancelling is idempotent for the host). Already busy:
    /// no-op. Settled: refused (a settled child runs no turns).
    TurnStarted,
    /// The current turn ended; `stop_reason` is the agent's stop reason, kept for the result
    /// capture (`end_turn`, `cancelled`, `error`, ...). Settled: idempotent no-op (duplicate).
    TurnFinished {
        /// The stop reason of the turn, if the driver reported one.
        stop_reason: Option<String>,
    },
    /// The agent loop reports it is idle (no turn runs), e.g. after a cold resume with nothing
    /// to do. Settled: idempotent no-op.
    Idle,
    /// A queued waking message was received by the running turn (a wait for children), so it
    /// needs no turn of its own. Nothing queued: no-op. Settled: idempotent no-op.
    MessageTaken,
    /// A child was materialized with this activation as its live owner. Already owned: no-op.
    /// Refused when settled, when stopping (admission is closed, X1) and for the child itself.
    ChildAdopted(SessionId),
    /// An owned child was disposed. Unknown child (never owned, already removed, or after
    /// settlement): idempotent no-op.
    ChildDisposed(SessionId),
    /// Interrupt (M4; authority is checked before, in [`crate::authority`]): cancels the
    /// current turn. Nothing running or settled: idempotent no-op.
    Cancel,
    /// Drain (X1): no more turns. Cancels the current turn if any; settles as soon as the loop
    /// is idle and all owned children are disposed, whatever is left in the inbox. Already
    /// stopping or settled: idempotent no-op.
    Stop,
}

impl ActivationEvent {
    /// The event's snake_case name, used in errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            ActivationEvent::MessageQueued => "message_queued",
            ActivationEvent::MessageAccepted => "message_accepted",
            ActivationEvent::MessageTaken => "message_taken",
            ActivationEvent::TurnStarted => "turn_started",
            ActivationEvent::TurnFinished { .. } => "turn_finished",
            ActivationEvent::Idle => "idle",
            ActivationEvent::ChildAdopted(_) => "child_adopted",
            ActivationEvent::ChildDisposed(_) => "child_disposed",
            ActivationEvent::Cancel => "cancel",
            ActivationEvent::Stop => "stop",
        }
    }
}

/// What the host must do, in the order returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivationAction {
    /// Start one agent turn on the pending input. If the activation was waiting, it is running
    /// again: record the new state.
    StartTurn,
    /// Cancel the running turn; the loop then reports [`ActivationEvent::TurnFinished`].
    CancelTurn,
    /// The activation is now waiting on its owned children: record the state.
    EnterWaiting,
    /// Settling, step 1: capture the child's result (last assistant message, stop reason).
    CaptureResult {
        /// The stop reason of the last finished turn, if any.
        stop_reason: Option<String>,
    },
    /// Settling, step 2: commit the terminal state (`settled`) in the registry.
    MarkTerminal,
    /// Settling, step 3: dispose the agent handle.
    DisposeHandle,
    /// Settling, step 4: settle the observers (emit `subagent/end`, E1).
    SettleObservers,
    /// Settling, step 5: send the `subagent-settled` notice to the durable parent's inbox (M2).
    DeliverSettlement {
        /// The durable direct parent, wherever it runs.
        parent_session: SessionId,
        /// The settled child.
        child: SessionId,
    },
}

/// One continuable child's activation (X2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    child_id: SessionId,
    parent_session: SessionId,
    state: ActivationState,
    owned_children: BTreeSet<SessionId>,
    inbox_len: u64,
    accepted: u64,
    busy: bool,
    stopping: bool,
    last_stop_reason: Option<String>,
}

impl Activation {
    /// A freshly materialized activation: running, idle, nothing pending, no owned children.
    /// `parent_session` is the durable direct parent from the frozen header (settlement target).
    pub fn new(child_id: SessionId, parent_session: SessionId) -> Self {
        Activation {
            child_id,
            parent_session,
            state: ActivationState::Running,
            owned_children: BTreeSet::new(),
            inbox_len: 0,
            accepted: 0,
            busy: false,
            stopping: false,
            last_stop_reason: None,
        }
    }

    /// The child's session id.
    pub fn child_id(&self) -> &SessionId {
        &self.child_id
    }
    /// The durable direct parent, the target of the settlement.
    pub fn parent_session(&self) -> &SessionId {
        &self.parent_session
    }
    /// The current state.
    pub fn state(&self) -> ActivationState {
        self.state
    }
    /// The live children this activation owns, sorted.
    pub fn owned_children(&self) -> &BTreeSet<SessionId> {
        &self.owned_children
    }
    /// Messages queued in the inbox and not yet accepted.
    pub fn inbox_len(&self) -> u64 {
        self.inbox_len
    }
    /// Turns accepted and not yet finished.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }
    /// True while a turn is requested or running.
    pub fn is_busy(&self) -> bool {
        self.busy
    }
    /// True after [`ActivationEvent::Stop`].
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }
    /// The stop reason of the last finished turn.
    pub fn last_stop_reason(&self) -> Option<&str> {
        self.last_stop_reason.as_deref()
    }

    /// Applies one event and returns the actions to execute, in order. Never panics; see each
    /// [`ActivationEvent`] variant for its outcome when it does not apply.
    pub fn handle(&mut self, event: ActivationEvent) -> Result<Vec<ActivationAction>, CoreError> {
        let settled = self.state == ActivationState::Settled;
        match event {
            ActivationEvent::MessageQueued => {
                if settled {
                    return Err(self.illegal("message_queued"));
                }
                self.inbox_len = self.inbox_len.saturating_add(1);
                Ok(self.start_turn_if_idle())
            }
            ActivationEvent::MessageAccepted => {
                if settled {
                    return Err(self.illegal("message_accepted"));
                }
                self.inbox_len = self.inbox_len.saturating_sub(1);
                self.accepted = self.accepted.saturating_add(1);
                Ok(Vec::new())
            }
            ActivationEvent::MessageTaken => {
                if !settled {
                    self.inbox_len = self.inbox_len.saturating_sub(1);
                }
                Ok(Vec::new())
            }
            ActivationEvent::TurnStarted => {
                if settled {
                    return Err(self.illegal("turn_started"));
                }
                self.busy = true;
                self.state = ActivationState::Running;
                if self.stopping {
                    return Ok(vec![ActivationAction::CancelTurn]);
                }
                Ok(Vec::new())
            }
            ActivationEvent::TurnFinished { stop_reason } => {
                if settled {
                    return Ok(Vec::new());
                }
                self.busy = false;
                self.accepted = self.accepted.saturating_sub(1);
                if stop_reason.is_some() {
                    self.last_stop_reason = stop_reason;
                }
                Ok(self.after_idle())
            }
            ActivationEvent::Idle => {
                if settled {
                    return Ok(Vec::new());
                }
                self.busy = false;
                Ok(self.after_idle())
            }
            ActivationEvent::ChildAdopted(child) => {
                if settled {
                    return Err(self.illegal("child_adopted"));
                }
                if self.stopping {
                    return Err(self.illegal("child_adopted"));
                }
                if child == self.child_id {
                    return Err(self.illegal("child_adopted(self)"));
                }
                self.owned_children.insert(child);
                Ok(Vec::new())
            }
            ActivationEvent::ChildDisposed(child) => {
                if !self.owned_children.remove(&child) {
                    return Ok(Vec::new());
                }
                match self.state {
                    ActivationState::Waiting if self.owned_children.is_empty() => Ok(self.settle()),
                    ActivationState::Waiting
                    | ActivationState::Running
                    | ActivationState::Settled => Ok(Vec::new()),
                }
            }
            ActivationEvent::Cancel => {
                if settled || !self.busy {
                    return Ok(Vec::new());
                }
                Ok(vec![ActivationAction::CancelTurn])
            }
            ActivationEvent::Stop => {
                if settled || self.stopping {
                    return Ok(Vec::new());
                }
                self.stopping = true;
                if self.busy {
                    return Ok(vec![ActivationAction::CancelTurn]);
                }
                Ok(self.after_idle())
            }
        }
    }

    /// The refusal for an event that does not apply in the current state.
    fn illegal(&self, event: &'static str) -> CoreError {
        let state = match self.state {
            ActivationState::Running | ActivationState::Waiting if self.stopping => "stopping",
            ActivationState::Running | ActivationState::Waiting | ActivationState::Settled => {
                self.state.as_str()
            }
        };
        CoreError::IllegalTransition {
            session: self.child_id.to_string(),
            state,
            event,
        }
    }

    /// True when input waits for a turn (ignored while stopping).
    fn has_pending_input(&self) -> bool {
        !self.stopping && (self.inbox_len > 0 || self.accepted > 0)
    }

    /// After a message: asks for a turn if the loop is idle (waiting -> running).
    fn start_turn_if_idle(&mut self) -> Vec<ActivationAction> {
        if self.busy || !self.has_pending_input() {
            return Vec::new();
        }
        self.busy = true;
        self.state = ActivationState::Running;
        vec![ActivationAction::StartTurn]
    }

    /// The loop is idle: continue with pending input, or wait for owned children, or settle.
    fn after_idle(&mut self) -> Vec<ActivationAction> {
        if self.has_pending_input() {
            return self.start_turn_if_idle();
        }
        if self.owned_children.is_empty() {
            return self.settle();
        }
        match self.state {
            ActivationState::Running => {
                self.state = ActivationState::Waiting;
                vec![ActivationAction::EnterWaiting]
            }
            ActivationState::Waiting | ActivationState::Settled => Vec::new(),
        }
    }

    /// Settles: the five steps in their fixed order.
    fn settle(&mut self) -> Vec<ActivationAction> {
        self.state = ActivationState::Settled;
        self.busy = false;
        vec![
            ActivationAction::CaptureResult {
                stop_reason: self.last_stop_reason.clone(),
            },
            ActivationAction::MarkTerminal,
            ActivationAction::DisposeHandle,
            ActivationAction::SettleObservers,
            ActivationAction::DeliverSettlement {
                parent_session: self.parent_session.clone(),
                child: self.child_id.clone(),
            },
        ]
    }
}

#[cfg(test)]
mod tests;
