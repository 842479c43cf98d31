//! The data of the scripted agent's language (H1): a [`Script`] is a list of turns, each a list
//! of [`Step`]s, plus what to do once the turns run out ([`AfterScript`], by default: reply
//! `"done"`). The host's script driver interprets it (`lineage_drivers::script`); requests carry it
//! inside an [`AgentSpec::Script`].
//!
//! JSON (TOML is the same shape):
//!
//! ```json
//! {"turns": [
//!    [{"do": "reply", "text": "starting"},
//!     {"do": "spawn", "shape": "continuable", "prompt": "dig",
//!      "agent": {"driver": "script", "script": {"turns": [[{"do": "report", "content": "found it", "delivery": "wakeup"}]]}}},
//!     {"do": "wait_children"}],
//!    [{"do": "echo"}]
//!  ],
//!  "after": {"do": "reply", "text": "done"}}
//! ```

use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{NodeId, SessionId};

pub use lineage_core::engine::WaitMode;
use lineage_core::messages::Delivery;
use serde::{Deserialize, Serialize};

use crate::agent::AgentSpec;
use crate::error::ProtocolError;

/// The provider name of scripted agents in descriptors (P1).
pub const SCRIPT_PROVIDER: &str = "script";

/// A scripted agent: turns of steps, then [`AfterScript`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Turn `i` runs `turns[i]`.
    #[serde(default)]
    pub turns: Vec<Vec<Step>>,
    /// What every turn past the end does.
    #[serde(default)]
    pub after: AfterScript,
}

/// One step of a scripted turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Reply with this text.
    Reply {
        /// The assistant text.
        text: String,
    },
    /// Reply with the text of this turn's input messages, joined by newlines (handy in tests).
    Echo,
    /// Report to the direct parent (M1).
    Report {
        /// The text.
        content: String,
        /// `quiet` (default) or `wakeup`.
        #[serde(default = "quiet")]
        delivery: Delivery,
    },
    /// Spawn a child.
    Spawn {
        /// `one-shot` or `continuable`.
        shape: SubagentShape,
        /// The child's agent; a scripted child that replies "done" when absent.
        #[serde(default)]
        agent: Option<Box<AgentSpec>>,
        /// The first user message.
        #[serde(default)]
        prompt: String,
        /// Preferred node.
        #[serde(default)]
        node: Option<NodeId>,
        /// A human label.
        #[serde(default)]
        label: Option<String>,
        /// Persona (C1).
        #[serde(default)]
        persona: Option<String>,
        /// Tool filter (C1).
        #[serde(default)]
        tool_filter: Option<Vec<String>>,
        /// How long the child's subtree may run (Q2), in ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Reply with the outcome of this turn's last action step (a spawn, followup, interrupt,
    /// list or await), received inside the turn: a one-shot child's output (its stop reason
    /// when it has none), `spawned <child>` for a continuable child, `done`, the messages an
    /// await received (one a line, `(nothing arrived)` when none did), one line per child for a
    /// list, `refused: <why>`, or `no spawn` (H1: actions during a turn).
    ReplyResult,
    /// Do not finish before every owned child settled.
    WaitChildren,
    /// During the turn, send a followup to a continuable child (M3): `child`, or the last
    /// child spawned in this turn when absent.
    Followup {
        /// The child; the last one spawned in this turn when absent.
        #[serde(default)]
        child: Option<SessionId>,
        /// The text.
        content: String,
    },
    /// During the turn, interrupt a descendant's current turn (M4, this agent's authority as
    /// its ancestor): `child`, or the last child spawned in this turn when absent.
    Interrupt {
        /// The child; the last one spawned in this turn when absent.
        #[serde(default)]
        child: Option<SessionId>,
    },
    /// During the turn, list this agent's children (state, shape, node, label, last report).
    ListChildren,
    /// During the turn, wait for children's reports and settlements and receive them in this
    /// turn: `all` (default) until every child named (every child not yet settled when none
    /// is) settled, `any` until one message arrived; what arrived by `timeout_ms` otherwise.
    AwaitChildren {
        /// The children; every child not yet settled when absent.
        #[serde(default)]
        children: Option<Vec<SessionId>>,
        /// `all` or `any`.
        #[serde(default)]
        mode: WaitMode,
        /// How long to wait at most (default 60 000).
        #[serde(default = "default_wait_ms")]
        timeout_ms: u64,
    },
    /// Declare the usage this agent has reached so far (Q3), as an ACP agent's `usage_update`
    /// does: recorded in the registry when the step runs, replacing the previous declaration,
    /// and counted against every budget above.
    Usage {
        /// Tokens in context now.
        tokens: u64,
        /// Cumulative cost so far, in millionths of `currency`.
        #[serde(default)]
        cost_micros: Option<u64>,
        /// The cost's unit, e.g. `USD`.
        #[serde(default)]
        currency: Option<String>,
    },
    /// Simulated work.
    Sleep {
        /// Milliseconds.
        ms: u64,
    },
    /// The turn fails.
    Fail {
        /// Why.
        reason: String,
    },
}

fn quiet() -> Delivery {
    Delivery::Quiet
}

fn default_wait_ms() -> u64 {
    60_000
}

/// What a scripted agent does once its turns are used up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum AfterScript {
    /// Reply with this text (default: `"done"`).
    Reply {
        /// The text.
        text: String,
    },
    /// Reply with the input, like [`Step::Echo`].
    Echo,
    /// Repeat the last scripted turn (reply `"done"` if there is none).
    RepeatLast,
    /// Fail every further turn.
    Fail {
        /// Why.
        reason: String,
    },
}

impl Default for AfterScript {
    fn default() -> Self {
        AfterScript::Reply {
            text: "done".to_owned(),
        }
    }
}

impl Script {
    /// A script whose every turn replies with its input (what a `script` profile runs).
    pub fn echo() -> Self {
        Script {
            turns: Vec::new(),
            after: AfterScript::Echo,
        }
    }

    /// A script whose every turn replies `"done"`.
    pub fn done() -> Self {
        Script::default()
    }

    /// Parses a script from JSON, refusing unknown fields with a one-line error.
    pub fn from_json(text: &str) -> Result<Self, ProtocolError> {
        serde_json::from_str(text).map_err(|e| ProtocolError::MalformedScript(e.to_string()))
    }
}
