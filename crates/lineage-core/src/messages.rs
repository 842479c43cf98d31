//! The wire contract: versioned JSON payloads on the bus (M1, M2, E1, N3).
//!
//! Four payloads, each a JSON object whose first field is `"v": 1` and whose field names are
//! the seed's, in snake case, so that `nats sub` shows something a human can read:
//!
//! | type | literal fields | travels on |
//! |---|---|---|
//! | [`SubagentReport`] | `"kind": "subagent-report"`, `"form": "relay"` | `...parent.<parent>.inbox` (JetStream) |
//! | [`SubagentSettled`] | `"kind": "subagent-settled"`, `"form": "notice"` | `...parent.<parent>.inbox` (JetStream) |
//! | [`SubagentRunInfo`] | `"event": "subagent/start"` | `...parent.<parent>.start` |
//! | [`SubagentRunEndInfo`] | `"event": "subagent/end"` | `...parent.<parent>.end` |
//!
//! [`InboxMessage`] decodes either inbox payload by its `kind`, [`LifecycleEvent`] either
//! lifecycle payload by its `event`.
//!
//! The literal fields (`v`, `kind`, `form`, `event`) are not stored in the Rust values at all:
//! private zero-sized marker types write them on encode and check them on decode, so a value can
//! never hold the wrong literal, and a report that says `"form": "notice"` is refused. Decoding
//! checks `v` first: any `v` other than 1 is [`CoreError::UnsupportedVersion`]; every other
//! failure is [`CoreError::InvalidPayload`] with a one-line reason. Unknown extra fields are
//! ignored, so version 1 can gain optional fields; anything incompatible bumps `v`.

use std::fmt;

use serde::de::{self};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::descriptor::SubagentShape;
use crate::error::CoreError;
use crate::ids::{NodeId, RunId, SessionId};

mod decode;
mod envelopes;
mod wire;

pub use envelopes::{InboxMessage, LifecycleEvent};

use decode::{
    breaks_line, encode, from_checked_value, inbox_from_value, lifecycle_from_value, one_line,
    parse_json, shorten,
};
use wire::{Incoming, Outgoing};

/// The payload version this build writes and reads.
pub const WIRE_VERSION: u64 = 1;
/// `kind` of a report.
pub const REPORT_KIND: &str = "subagent-report";
/// `kind` of a settlement notice.
pub const SETTLED_KIND: &str = "subagent-settled";
/// `form` of a report: relayed in full to the parent.
pub const RELAY_FORM: &str = "relay";
/// `form` of a settlement: shown as a one-line notice.
pub const NOTICE_FORM: &str = "notice";
/// `event` of a start payload.
pub const START_EVENT: &str = "subagent/start";
/// `event` of an end payload.
pub const END_EVENT: &str = "subagent/end";
/// Longest settlement summary [`settlement_summary`] makes, in characters.
pub const MAX_SUMMARY_CHARS: usize = 200;

/// Names the payload kind in [`CoreError::InvalidPayload`] for a message of unknown kind.
const INBOX_WHAT: &str = "inbox message";
/// Names the payload kind in [`CoreError::InvalidPayload`] for an event of unknown kind.
const LIFECYCLE_WHAT: &str = "lifecycle event";

/// Writes the literal `$text` for field `$field` and refuses anything else on decode.
macro_rules! wire_literal {
    ($(#[$doc:meta])* $name:ident, $field:literal, $text:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        struct $name;

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($text)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                if raw == $text {
                    Ok($name)
                } else {
                    Err(de::Error::custom(format!(
                        "{} must be {:?}, got {:?}",
                        $field,
                        $text,
                        shorten(&raw)
                    )))
                }
            }
        }
    };
}

wire_literal!(
    /// `"kind": "subagent-report"`.
    ReportKind,
    "kind",
    REPORT_KIND
);
wire_literal!(
    /// `"kind": "subagent-settled"`.
    SettledKind,
    "kind",
    SETTLED_KIND
);
wire_literal!(
    /// `"form": "relay"`.
    RelayForm,
    "form",
    RELAY_FORM
);
wire_literal!(
    /// `"form": "notice"`.
    NoticeForm,
    "form",
    NOTICE_FORM
);
wire_literal!(
    /// `"event": "subagent/start"`.
    StartEvent,
    "event",
    START_EVENT
);
wire_literal!(
    /// `"event": "subagent/end"`.
    EndEvent,
    "event",
    END_EVENT
);

/// `"v": 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct V1;

impl Serialize for V1 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(WIRE_VERSION)
    }
}

impl<'de> Deserialize<'de> for V1 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let found = u64::deserialize(d)?;
        if found == WIRE_VERSION {
            Ok(V1)
        } else {
            Err(de::Error::custom(format!(
                "unsupported version {found}; this build speaks version {WIRE_VERSION}"
            )))
        }
    }
}

/// How a report reaches the parent (M1).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// `quiet`: only queue it in the parent's inbox; the parent sees it on its next turn.
    Quiet,
    /// `wakeup`: queue it and start a parent turn if the parent is idle.
    Wakeup,
}

/// Why a child's run ended (S1, E1, M2).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `completed`: the child finished its work normally.
    Completed,
    /// `failed`: the child's turn ended with an error (model, tool or host failure).
    Failed,
    /// `interrupted`: an authorized interrupt cancelled the child's turn (M4).
    Interrupted,
    /// `disposed`: the child was disposed before it finished, e.g. by a drain (X1).
    Disposed,
    /// `max_turns`: the child stopped because it reached its turn limit.
    MaxTurns,
    /// `deadline`: the child's subtree ran past its deadline (Q2) and was drained.
    Deadline,
    /// `budget`: a budget over the child's subtree was spent (Q3) and it was drained.
    Budget,
    /// `idle`: a top-level session stayed idle past its idle TTL ([`crate::idle`]) and its
    /// tree was drained.
    Idle,
}

impl StopReason {
    /// Every stop reason, in declaration order.
    pub const ALL: [StopReason; 8] = [
        StopReason::Completed,
        StopReason::Failed,
        StopReason::Interrupted,
        StopReason::Disposed,
        StopReason::MaxTurns,
        StopReason::Deadline,
        StopReason::Budget,
        StopReason::Idle,
    ];

    /// The stop reason spelt `text` ([`StopReason::as_str`]), if any.
    pub fn parse(text: &str) -> Option<Self> {
        StopReason::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// The wire spelling, e.g. `max_turns`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::Failed => "failed",
            StopReason::Interrupted => "interrupted",
            StopReason::Disposed => "disposed",
            StopReason::MaxTurns => "max_turns",
            StopReason::Deadline => "deadline",
            StopReason::Budget => "budget",
            StopReason::Idle => "idle",
        }
    }
}

/// Text guaranteed to be one line: no control characters (so no `\n`, `\r`, `\t`) and no
/// Unicode line or paragraph separator. Serialized as a plain JSON string; a string that breaks
/// the rule is refused on decode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct OneLine(String);

impl OneLine {
    /// Makes `text` one line: every run of whitespace and control characters (line breaks
    /// included) becomes one space, and the ends are trimmed.
    pub fn new(text: &str) -> Self {
        OneLine(one_line(text))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OneLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for OneLine {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for OneLine {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        if raw.chars().any(breaks_line) {
            return Err(de::Error::custom(
                "summary must be one line, without line breaks or control characters",
            ));
        }
        Ok(OneLine(raw))
    }
}

/// A child's report to its direct parent (M1): a user message into the parent's inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentReport {
    /// The reporting child.
    pub sender_session_id: SessionId,
    /// Its durable parent, whose inbox receives the report.
    pub parent_session_id: SessionId,
    /// The child's outbox sequence number, shared by its reports and its settlement; with the
    /// sender it makes the dedup id.
    pub seq: u64,
    /// The report text, relayed to the parent in full.
    pub content: String,
    /// Whether the report wakes an idle parent.
    pub delivery: Delivery,
    /// When the child sent it, unix milliseconds.
    pub at_ms: u64,
}

/// A continuable child's settlement notice to its parent (M2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentSettled {
    /// The child that settled.
    pub sender_session_id: SessionId,
    /// Its durable parent, whose inbox receives the notice.
    pub parent_session_id: SessionId,
    /// The child's outbox sequence number (see [`SubagentReport::seq`]).
    pub seq: u64,
    /// One line shown to the parent, e.g. from [`settlement_summary`].
    pub summary: OneLine,
    /// Why the child's run ended.
    pub stop_reason: StopReason,
    /// The child's final output, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// When the child settled, unix milliseconds.
    pub at_ms: u64,
    /// A reference to the child's changes against the files it started from, when it has a
    /// workspace (issue 39).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Box<crate::workspace::WorkspaceChanges>>,
}

impl SubagentSettled {
    /// A settlement notice; `summary` is made one line (line breaks become spaces).
    pub fn new(
        sender_session_id: SessionId,
        parent_session_id: SessionId,
        seq: u64,
        summary: &str,
        stop_reason: StopReason,
        output: Option<String>,
        at_ms: u64,
    ) -> Self {
        SubagentSettled {
            sender_session_id,
            parent_session_id,
            seq,
            summary: OneLine::new(summary),
            stop_reason,
            output,
            at_ms,
            changes: None,
        }
    }
}

/// `subagent/start` (E1): the child is ready. Sent on the parent's `start` subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentRunInfo {
    /// The run; pairs this event with its `subagent/end`.
    pub run_id: RunId,
    /// The provider that hosts the child.
    pub provider: String,
    /// The child session.
    pub child_id: SessionId,
    /// The delegating parent (the listener scope, E2).
    pub parent_session_id: SessionId,
    /// True when the child runs on the same node as its parent.
    pub local: bool,
    /// One-shot or continuable; the same pair of events serves both.
    pub shape: SubagentShape,
    /// The node hosting the child.
    pub node: NodeId,
    /// When the child became ready, unix milliseconds.
    pub at_ms: u64,
}

impl SubagentRunInfo {
    /// The `subagent/end` that closes this run: same run, child, parent, provider, shape and
    /// node, plus how it ended.
    pub fn ended(
        &self,
        stop_reason: StopReason,
        last_assistant_message: Option<String>,
        at_ms: u64,
    ) -> SubagentRunEndInfo {
        SubagentRunEndInfo {
            run_id: self.run_id.clone(),
            provider: self.provider.clone(),
            child_id: self.child_id.clone(),
            parent_session_id: self.parent_session_id.clone(),
            local: self.local,
            shape: self.shape,
            node: self.node.clone(),
            stop_reason,
            last_assistant_message,
            at_ms,
        }
    }
}

/// `subagent/end` (E1): the child settled. Sent on the parent's `end` subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentRunEndInfo {
    /// The run; pairs this event with its `subagent/start`.
    pub run_id: RunId,
    /// The provider that hosted the child.
    pub provider: String,
    /// The child session.
    pub child_id: SessionId,
    /// The delegating parent.
    pub parent_session_id: SessionId,
    /// True when the child ran on the same node as its parent.
    pub local: bool,
    /// One-shot or continuable.
    pub shape: SubagentShape,
    /// The node that hosted the child.
    pub node: NodeId,
    /// Why the run ended.
    pub stop_reason: StopReason,
    /// The child's last assistant message, if it wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_assistant_message: Option<String>,
    /// When the child settled, unix milliseconds.
    pub at_ms: u64,
}

/// `encode` and `decode` on one payload type: its wire form is its envelope
/// ([`wire::Outgoing`]); its own serde impls write and read only its fields.
macro_rules! wire_codec {
    ($name:ident, $what:expr) => {
        impl $name {
            /// The JSON bytes in the envelope, `"v": 1` first.
            pub fn encode(&self) -> Vec<u8> {
                encode(&Outgoing::of(self))
            }

            /// Reads the payload: [`CoreError::UnsupportedVersion`] unless `v` is 1, then
            /// [`CoreError::InvalidPayload`] for any wrong literal, missing field or bad value.
            pub fn decode(bytes: &[u8]) -> Result<Self, CoreError> {
                from_checked_value::<Incoming<$name>>($what, parse_json($what, bytes)?)
                    .map(|incoming| incoming.body)
            }
        }
    };
}

wire_codec!(SubagentReport, REPORT_KIND);
wire_codec!(SubagentSettled, SETTLED_KIND);
wire_codec!(SubagentRunInfo, START_EVENT);
wire_codec!(SubagentRunEndInfo, END_EVENT);

impl SubagentReport {
    /// `"<sender_session_id>-<seq>"`, the `Nats-Msg-Id` (N2).
    pub fn dedup_id(&self) -> String {
        dedup_id(&self.sender_session_id, self.seq)
    }
}

impl SubagentSettled {
    /// `"<sender_session_id>-<seq>"`, the `Nats-Msg-Id` (N2).
    pub fn dedup_id(&self) -> String {
        dedup_id(&self.sender_session_id, self.seq)
    }
}

/// The one-line summary of a settlement (M2), at most [`MAX_SUMMARY_CHARS`] characters:
/// `subagent <child> <what happened>`, then `: <output>` when there is output. Line breaks
/// become spaces; a longer text is cut on a character boundary and ends with `…`.
pub fn settlement_summary(
    child_label_or_id: &str,
    stop_reason: StopReason,
    output: Option<&str>,
) -> String {
    let what = match stop_reason {
        StopReason::Completed => "completed",
        StopReason::Failed => "failed",
        StopReason::Interrupted => "was interrupted",
        StopReason::Disposed => "was disposed",
        StopReason::MaxTurns => "stopped at its turn limit",
        StopReason::Deadline => "ran past its deadline",
        StopReason::Budget => "ran out of budget",
        StopReason::Idle => "was idle past its idle TTL",
    };
    let mut text = format!("subagent {} {what}", one_line(child_label_or_id));
    if let Some(output) = output.map(one_line).filter(|o| !o.is_empty()) {
        text.push_str(": ");
        text.push_str(&output);
    }
    let text = one_line(&text);
    if text.chars().count() <= MAX_SUMMARY_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_SUMMARY_CHARS - 1).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// `"<sender>-<seq>"`.
fn dedup_id(sender: &SessionId, seq: u64) -> String {
    format!("{sender}-{seq}")
}

#[cfg(test)]
mod tests;
