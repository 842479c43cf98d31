//! The data of the scripted agent's language (H1): a [`Script`] is a list of turns, each a list
//! of [`Step`]s, plus what to do once the turns run out ([`AfterScript`], by default: reply
//! `"done"`). The host's script driver interprets it (`lineage_drivers::script`); requests carry it
//! inside an [`AgentSpec::Script`].
//!
//! The whole format, one step at a time, is `docs/script.md`; [`schema`] is its JSON Schema
//! (`lineage script schema`). Text a step says is always `content` (`reply`, `report`,
//! `followup`); `reply` still reads the older `text` ([`deprecations`] names each use, which the
//! CLI prints as a warning).
//!
//! JSON (TOML is the same shape):
//!
//! ```json
//! {"turns": [
//!    [{"do": "reply", "content": "starting"},
//!     {"do": "spawn", "shape": "continuable", "prompt": "dig",
//!      "agent": {"driver": "script", "script": {"turns": [[{"do": "report", "content": "found it", "delivery": "wakeup"}]]}}},
//!     {"do": "await_children"}],
//!    [{"do": "echo"}]
//!  ],
//!  "after": {"do": "reply", "content": "done"}}
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
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Reply with this text.
    Reply {
        /// The assistant text (`text` is read too, deprecated).
        #[serde(alias = "text")]
        content: String,
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
        /// How long the child's subtree may run (Q2), in ms (1 ms to 30 days).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<lineage_core::deadline::Timeout>,
        /// The child's files (issue 39): `"inherit"` (a copy of the parent's; the default
        /// when the parent has a workspace) or `"empty"`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace: Option<crate::workspace::SpawnWorkspace>,
        /// `"await": false`: the script goes on at once instead of waiting for the spawn's
        /// answer (a one-shot child's result), so one-shot spawns in a row run side by side;
        /// the next `await_children` step (or the turn's end) collects their results.
        #[serde(rename = "await", default = "yes", skip_serializing_if = "is_true")]
        wait: bool,
    },
    /// Reply with the outcome of this turn's last action step (a spawn, followup, interrupt,
    /// list or await), received inside the turn: a one-shot child's output (its stop reason
    /// when it has none), `spawned <child>` for a continuable child, `done`, the messages an
    /// await received (one a line, `(nothing arrived)` when none did), one line per child for a
    /// list, `refused: <why>`, or `no spawn` (H1: actions during a turn).
    ReplyResult,
    /// A marker, kept for old scripts: the turn goes on and ends by itself; the children's
    /// reports and settlements wake later turns. To receive them in this turn, use
    /// [`Step::AwaitChildren`].
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

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn quiet() -> Delivery {
    Delivery::Quiet
}

fn default_wait_ms() -> u64 {
    60_000
}

/// What a scripted agent does once its turns are used up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum AfterScript {
    /// Reply with this text (default: `"done"`).
    Reply {
        /// The text (`text` is read too, deprecated).
        #[serde(alias = "text")]
        content: String,
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
            content: "done".to_owned(),
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

/// The JSON Schema (draft 2020-12) of a [`Script`]: what `lineage script schema` prints. It
/// describes the current spelling only (a `reply` with the deprecated `text` does not match).
pub fn schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(Script)).unwrap_or_default();
    if let Some(object) = schema.as_object_mut() {
        object.insert(
            "title".to_owned(),
            "lineage script: the scripted agent's turns of steps (docs/script.md)".into(),
        );
    }
    schema
}

/// Where a script (as JSON, nested scripts of spawned children included) uses a spelling that
/// is still read but deprecated, one line each saying what to write instead; empty when none.
pub fn deprecations(script: &serde_json::Value) -> Vec<String> {
    let mut found = Vec::new();
    deprecated_in(script, "script", &mut found);
    found
}

fn deprecated_in(value: &serde_json::Value, at: &str, found: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(object) => {
            if object.get("do").and_then(|d| d.as_str()) == Some("reply")
                && object.contains_key("text")
            {
                found.push(format!(
                    "{at}: `reply` takes `content` now; `text` is deprecated (write {{\"do\": \"reply\", \"content\": ...}})"
                ));
            }
            for (key, inner) in object {
                deprecated_in(inner, &format!("{at}.{key}"), found);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                deprecated_in(inner, &format!("{at}[{i}]"), found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o1_reply_takes_content_and_still_reads_the_deprecated_text() {
        let new = Script::from_json(
            r#"{"turns":[[{"do":"reply","content":"hi"}]],"after":{"do":"reply","content":"bye"}}"#,
        )
        .unwrap();
        let old = Script::from_json(
            r#"{"turns":[[{"do":"reply","text":"hi"}]],"after":{"do":"reply","text":"bye"}}"#,
        )
        .unwrap();
        assert_eq!(new, old);
        assert_eq!(
            serde_json::to_string(&new).unwrap(),
            r#"{"turns":[[{"do":"reply","content":"hi"}]],"after":{"do":"reply","content":"bye"}}"#
        );
        let both = Script::from_json(r#"{"turns":[[{"do":"reply","text":"a","content":"b"}]]}"#);
        assert!(both.is_err(), "{both:?}");
    }

    #[test]
    fn o1_deprecations_name_every_old_spelling_nested_scripts_too() {
        let raw: serde_json::Value = serde_json::from_str(
            r#"{"turns":[[{"do":"reply","text":"a"},{"do":"spawn","shape":"one-shot","agent":{"driver":"script","script":{"turns":[[{"do":"reply","text":"b"}]]}}}]],"after":{"do":"reply","text":"c"}}"#,
        )
        .unwrap();
        let found = deprecations(&raw);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found
                .iter()
                .any(|l| l.starts_with("script.after: `reply` takes `content`")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|l| l.starts_with("script.turns[0][1].agent.script.turns[0][0]:")),
            "{found:?}"
        );
        let clean: serde_json::Value = serde_json::from_str(
            r#"{"turns":[[{"do":"reply","content":"a"},{"do":"report","content":"r"}]]}"#,
        )
        .unwrap();
        assert!(deprecations(&clean).is_empty());
    }

    #[test]
    fn o1_the_schema_names_every_step_and_the_current_spelling() {
        let schema = schema().to_string();
        for step in [
            "reply",
            "echo",
            "report",
            "spawn",
            "reply_result",
            "wait_children",
            "followup",
            "interrupt",
            "list_children",
            "await_children",
            "usage",
            "sleep",
            "fail",
            "repeat_last",
        ] {
            assert!(
                schema.contains(&format!("\"{step}\"")),
                "{step} missing from {schema}"
            );
        }
        assert!(schema.contains("\"content\""), "{schema}");
        assert!(!schema.contains("\"text\""), "{schema}");
    }
}
