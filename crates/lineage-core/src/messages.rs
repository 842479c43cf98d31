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

use serde::de::{self, DeserializeOwned};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::descriptor::SubagentShape;
use crate::error::CoreError;
use crate::ids::{NodeId, RunId, SessionId};

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
}

impl StopReason {
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
#[serde(into = "ReportWire", from = "ReportWire")]
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
#[serde(into = "SettledWire", from = "SettledWire")]
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
    pub output: Option<String>,
    /// When the child settled, unix milliseconds.
    pub at_ms: u64,
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
        }
    }
}

/// `subagent/start` (E1): the child is ready. Sent on the parent's `start` subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "StartWire", from = "StartWire")]
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
#[serde(into = "EndWire", from = "EndWire")]
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
    pub last_assistant_message: Option<String>,
    /// When the child settled, unix milliseconds.
    pub at_ms: u64,
}

/// `SubagentReport` as it travels.
#[derive(Serialize, Deserialize)]
struct ReportWire {
    v: V1,
    kind: ReportKind,
    form: RelayForm,
    sender_session_id: SessionId,
    parent_session_id: SessionId,
    seq: u64,
    content: String,
    delivery: Delivery,
    at_ms: u64,
}

impl From<SubagentReport> for ReportWire {
    fn from(m: SubagentReport) -> Self {
        ReportWire {
            v: V1,
            kind: ReportKind,
            form: RelayForm,
            sender_session_id: m.sender_session_id,
            parent_session_id: m.parent_session_id,
            seq: m.seq,
            content: m.content,
            delivery: m.delivery,
            at_ms: m.at_ms,
        }
    }
}

impl From<ReportWire> for SubagentReport {
    fn from(w: ReportWire) -> Self {
        SubagentReport {
            sender_session_id: w.sender_session_id,
            parent_session_id: w.parent_session_id,
            seq: w.seq,
            content: w.content,
            delivery: w.delivery,
            at_ms: w.at_ms,
        }
    }
}

/// `SubagentSettled` as it travels.
#[derive(Serialize, Deserialize)]
struct SettledWire {
    v: V1,
    kind: SettledKind,
    form: NoticeForm,
    sender_session_id: SessionId,
    parent_session_id: SessionId,
    seq: u64,
    summary: OneLine,
    stop_reason: StopReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<String>,
    at_ms: u64,
}

impl From<SubagentSettled> for SettledWire {
    fn from(m: SubagentSettled) -> Self {
        SettledWire {
            v: V1,
            kind: SettledKind,
            form: NoticeForm,
            sender_session_id: m.sender_session_id,
            parent_session_id: m.parent_session_id,
            seq: m.seq,
            summary: m.summary,
            stop_reason: m.stop_reason,
            output: m.output,
            at_ms: m.at_ms,
        }
    }
}

impl From<SettledWire> for SubagentSettled {
    fn from(w: SettledWire) -> Self {
        SubagentSettled {
            sender_session_id: w.sender_session_id,
            parent_session_id: w.parent_session_id,
            seq: w.seq,
            summary: w.summary,
            stop_reason: w.stop_reason,
            output: w.output,
            at_ms: w.at_ms,
        }
    }
}

/// `SubagentRunInfo` as it travels.
#[derive(Serialize, Deserialize)]
struct StartWire {
    v: V1,
    event: StartEvent,
    run_id: RunId,
    provider: String,
    child_id: SessionId,
    parent_session_id: SessionId,
    local: bool,
    shape: SubagentShape,
    node: NodeId,
    at_ms: u64,
}

impl From<SubagentRunInfo> for StartWire {
    fn from(m: SubagentRunInfo) -> Self {
        StartWire {
            v: V1,
            event: StartEvent,
            run_id: m.run_id,
            provider: m.provider,
            child_id: m.child_id,
            parent_session_id: m.parent_session_id,
            local: m.local,
            shape: m.shape,
            node: m.node,
            at_ms: m.at_ms,
        }
    }
}

impl From<StartWire> for SubagentRunInfo {
    fn from(w: StartWire) -> Self {
        SubagentRunInfo {
            run_id: w.run_id,
            provider: w.provider,
            child_id: w.child_id,
            parent_session_id: w.parent_session_id,
            local: w.local,
            shape: w.shape,
            node: w.node,
            at_ms: w.at_ms,
        }
    }
}

/// `SubagentRunEndInfo` as it travels.
#[derive(Serialize, Deserialize)]
struct EndWire {
    v: V1,
    event: EndEvent,
    run_id: RunId,
    provider: String,
    child_id: SessionId,
    parent_session_id: SessionId,
    local: bool,
    shape: SubagentShape,
    node: NodeId,
    stop_reason: StopReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_assistant_message: Option<String>,
    at_ms: u64,
}

impl From<SubagentRunEndInfo> for EndWire {
    fn from(m: SubagentRunEndInfo) -> Self {
        EndWire {
            v: V1,
            event: EndEvent,
            run_id: m.run_id,
            provider: m.provider,
            child_id: m.child_id,
            parent_session_id: m.parent_session_id,
            local: m.local,
            shape: m.shape,
            node: m.node,
            stop_reason: m.stop_reason,
            last_assistant_message: m.last_assistant_message,
            at_ms: m.at_ms,
        }
    }
}

impl From<EndWire> for SubagentRunEndInfo {
    fn from(w: EndWire) -> Self {
        SubagentRunEndInfo {
            run_id: w.run_id,
            provider: w.provider,
            child_id: w.child_id,
            parent_session_id: w.parent_session_id,
            local: w.local,
            shape: w.shape,
            node: w.node,
            stop_reason: w.stop_reason,
            last_assistant_message: w.last_assistant_message,
            at_ms: w.at_ms,
        }
    }
}

/// Anything that arrives in a parent's inbox (M1, M2), told apart by `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum InboxMessage {
    /// `kind: "subagent-report"`.
    Report(SubagentReport),
    /// `kind: "subagent-settled"`.
    Settled(SubagentSettled),
}

impl InboxMessage {
    /// The child that sent it.
    pub fn sender_session_id(&self) -> &SessionId {
        match self {
            InboxMessage::Report(m) => &m.sender_session_id,
            InboxMessage::Settled(m) => &m.sender_session_id,
        }
    }

    /// The parent whose inbox it is for.
    pub fn parent_session_id(&self) -> &SessionId {
        match self {
            InboxMessage::Report(m) => &m.parent_session_id,
            InboxMessage::Settled(m) => &m.parent_session_id,
        }
    }

    /// The sender's outbox sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            InboxMessage::Report(m) => m.seq,
            InboxMessage::Settled(m) => m.seq,
        }
    }

    /// When it was sent, unix milliseconds.
    pub fn at_ms(&self) -> u64 {
        match self {
            InboxMessage::Report(m) => m.at_ms,
            InboxMessage::Settled(m) => m.at_ms,
        }
    }

    /// `"<sender_session_id>-<seq>"`: the `Nats-Msg-Id` that lets JetStream drop a resent copy
    /// (N2).
    pub fn dedup_id(&self) -> String {
        dedup_id(self.sender_session_id(), self.seq())
    }

    /// The JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Reads either inbox payload, choosing by `kind`; checks `v` first.
    pub fn decode(bytes: &[u8]) -> Result<Self, CoreError> {
        inbox_from_value(parse_json(INBOX_WHAT, bytes)?)
    }
}

impl From<SubagentReport> for InboxMessage {
    fn from(m: SubagentReport) -> Self {
        InboxMessage::Report(m)
    }
}

impl From<SubagentSettled> for InboxMessage {
    fn from(m: SubagentSettled) -> Self {
        InboxMessage::Settled(m)
    }
}

impl<'de> Deserialize<'de> for InboxMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        inbox_from_value(value).map_err(de::Error::custom)
    }
}

/// A child's lifecycle event (E1), told apart by `event`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum LifecycleEvent {
    /// `event: "subagent/start"`.
    Start(SubagentRunInfo),
    /// `event: "subagent/end"`.
    End(SubagentRunEndInfo),
}

impl LifecycleEvent {
    /// The run both events of a pair share.
    pub fn run_id(&self) -> &RunId {
        match self {
            LifecycleEvent::Start(e) => &e.run_id,
            LifecycleEvent::End(e) => &e.run_id,
        }
    }

    /// The child.
    pub fn child_id(&self) -> &SessionId {
        match self {
            LifecycleEvent::Start(e) => &e.child_id,
            LifecycleEvent::End(e) => &e.child_id,
        }
    }

    /// The delegating parent (the subject's scope).
    pub fn parent_session_id(&self) -> &SessionId {
        match self {
            LifecycleEvent::Start(e) => &e.parent_session_id,
            LifecycleEvent::End(e) => &e.parent_session_id,
        }
    }

    /// The JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Reads either lifecycle payload, choosing by `event`; checks `v` first.
    pub fn decode(bytes: &[u8]) -> Result<Self, CoreError> {
        lifecycle_from_value(parse_json(LIFECYCLE_WHAT, bytes)?)
    }
}

impl From<SubagentRunInfo> for LifecycleEvent {
    fn from(e: SubagentRunInfo) -> Self {
        LifecycleEvent::Start(e)
    }
}

impl From<SubagentRunEndInfo> for LifecycleEvent {
    fn from(e: SubagentRunEndInfo) -> Self {
        LifecycleEvent::End(e)
    }
}

impl<'de> Deserialize<'de> for LifecycleEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        lifecycle_from_value(value).map_err(de::Error::custom)
    }
}

/// `encode` and `decode` on one payload type.
macro_rules! wire_codec {
    ($name:ident, $what:expr) => {
        impl $name {
            /// The JSON bytes, `"v": 1` first.
            pub fn encode(&self) -> Vec<u8> {
                encode(self)
            }

            /// Reads the payload: [`CoreError::UnsupportedVersion`] unless `v` is 1, then
            /// [`CoreError::InvalidPayload`] for any wrong literal, missing field or bad value.
            pub fn decode(bytes: &[u8]) -> Result<Self, CoreError> {
                from_checked_value($what, parse_json($what, bytes)?)
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

/// Serializes a payload. Our payload types hold only strings, integers, booleans and unit
/// enums, which serde_json always serializes, and writing into a `Vec` cannot fail; should that
/// ever change, the result is empty bytes, which every decoder refuses (fail closed).
fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Parses bytes as JSON.
fn parse_json(what: &'static str, bytes: &[u8]) -> Result<serde_json::Value, CoreError> {
    serde_json::from_slice(bytes).map_err(|e| invalid(what, &e.to_string()))
}

/// Checks that `value` is an object carrying `"v": 1`.
fn check_version(what: &'static str, value: &serde_json::Value) -> Result<(), CoreError> {
    let object = value
        .as_object()
        .ok_or_else(|| invalid(what, "expected a JSON object"))?;
    let v = object.get("v").ok_or_else(|| {
        invalid(
            what,
            "missing field `v`; every lineage payload carries \"v\": 1",
        )
    })?;
    let found = v.as_u64().ok_or_else(|| {
        invalid(
            what,
            &format!(
                "v must be a non-negative integer, got {}",
                shorten(&v.to_string())
            ),
        )
    })?;
    if found != WIRE_VERSION {
        return Err(CoreError::UnsupportedVersion {
            what,
            found,
            supported: WIRE_VERSION,
        });
    }
    Ok(())
}

/// Checks the version, then decodes `T` (whose serde checks the literal fields).
fn from_checked_value<T: DeserializeOwned>(
    what: &'static str,
    value: serde_json::Value,
) -> Result<T, CoreError> {
    check_version(what, &value)?;
    serde_json::from_value(value).map_err(|e| invalid(what, &e.to_string()))
}

/// Reads a string field of a JSON object, for dispatch.
fn literal_field<'a>(value: &'a serde_json::Value, field: &str) -> Option<&'a str> {
    value.get(field).and_then(serde_json::Value::as_str)
}

/// Decodes an inbox payload by its `kind`.
fn inbox_from_value(value: serde_json::Value) -> Result<InboxMessage, CoreError> {
    check_version(INBOX_WHAT, &value)?;
    match literal_field(&value, "kind") {
        Some(REPORT_KIND) => from_checked_value(REPORT_KIND, value).map(InboxMessage::Report),
        Some(SETTLED_KIND) => from_checked_value(SETTLED_KIND, value).map(InboxMessage::Settled),
        other => Err(invalid(
            INBOX_WHAT,
            &format!(
                "kind must be {REPORT_KIND:?} or {SETTLED_KIND:?}, got {}",
                describe(other, &value, "kind")
            ),
        )),
    }
}

/// Decodes a lifecycle payload by its `event`.
fn lifecycle_from_value(value: serde_json::Value) -> Result<LifecycleEvent, CoreError> {
    check_version(LIFECYCLE_WHAT, &value)?;
    match literal_field(&value, "event") {
        Some(START_EVENT) => from_checked_value(START_EVENT, value).map(LifecycleEvent::Start),
        Some(END_EVENT) => from_checked_value(END_EVENT, value).map(LifecycleEvent::End),
        other => Err(invalid(
            LIFECYCLE_WHAT,
            &format!(
                "event must be {START_EVENT:?} or {END_EVENT:?}, got {}",
                describe(other, &value, "event")
            ),
        )),
    }
}

/// Describes a dispatch field that matched nothing, for the error.
fn describe(text: Option<&str>, value: &serde_json::Value, field: &str) -> String {
    match (text, value.get(field)) {
        (Some(text), _) => format!("{:?}", shorten(text)),
        (None, Some(other)) => shorten(&other.to_string()),
        (None, None) => "nothing".to_owned(),
    }
}

/// A [`CoreError::InvalidPayload`] whose reason is one bounded line.
fn invalid(what: &'static str, reason: &str) -> CoreError {
    CoreError::InvalidPayload {
        what,
        reason: one_line(reason),
    }
}

/// True for characters that break a line or are otherwise invisible control codes.
fn breaks_line(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Every run of whitespace and control characters becomes one space; ends trimmed.
fn one_line(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || breaks_line(c))
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Keeps echoed input bounded in error messages.
fn shorten(text: &str) -> String {
    let mut out: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CHILD: &str = "01936c1e-7a3b-7cde-8f00-000000000002";
    const PARENT: &str = "01936c1e-7a3b-7cde-8f00-000000000001";
    const RUN: &str = "01936c1e-7a3b-7cde-8f00-0000000000aa";

    fn sid(s: &str) -> SessionId {
        SessionId::parse(s).unwrap()
    }

    fn report() -> SubagentReport {
        SubagentReport {
            sender_session_id: sid(CHILD),
            parent_session_id: sid(PARENT),
            seq: 3,
            content: "halfway".into(),
            delivery: Delivery::Quiet,
            at_ms: 1,
        }
    }

    fn start() -> SubagentRunInfo {
        SubagentRunInfo {
            run_id: RunId::parse(RUN).unwrap(),
            provider: "scripted".into(),
            child_id: sid(CHILD),
            parent_session_id: sid(PARENT),
            local: true,
            shape: SubagentShape::OneShot,
            node: NodeId::parse("node-1").unwrap(),
            at_ms: 5,
        }
    }

    fn report_json() -> serde_json::Value {
        serde_json::from_slice(&report().encode()).unwrap()
    }

    fn decode_err(bytes: &[u8]) -> CoreError {
        SubagentReport::decode(bytes).unwrap_err()
    }

    #[test]
    fn n3_report_form_notice_is_refused() {
        let mut v = report_json();
        v["form"] = json!("notice");
        let err = decode_err(v.to_string().as_bytes());
        assert!(matches!(
            err,
            CoreError::InvalidPayload {
                what: "subagent-report",
                ..
            }
        ));
        assert!(
            err.to_string()
                .contains(r#"form must be "relay", got "notice""#),
            "{err}"
        );
    }

    #[test]
    fn n3_wrong_kind_is_refused() {
        let mut v = report_json();
        v["kind"] = json!("subagent-settled");
        let err = decode_err(v.to_string().as_bytes()).to_string();
        assert!(err.contains("kind must be"), "{err}");
        v["kind"] = json!(7);
        assert!(SubagentReport::decode(v.to_string().as_bytes()).is_err());
    }

    #[test]
    fn n3_version_other_than_one_is_unsupported() {
        for found in [0u64, 2, 99] {
            let mut v = report_json();
            v["v"] = json!(found);
            assert_eq!(
                decode_err(v.to_string().as_bytes()),
                CoreError::UnsupportedVersion {
                    what: "subagent-report",
                    found,
                    supported: 1
                }
            );
            let err = InboxMessage::decode(v.to_string().as_bytes()).unwrap_err();
            assert!(matches!(err, CoreError::UnsupportedVersion { found: f, .. } if f == found));
        }
        // The version is checked before anything else, even a shape v1 would refuse.
        let err = LifecycleEvent::decode(br#"{"v":2,"event":"subagent/paused"}"#).unwrap_err();
        assert!(matches!(
            err,
            CoreError::UnsupportedVersion { found: 2, .. }
        ));
    }

    #[test]
    fn n3_missing_or_malformed_version_is_invalid() {
        for (text, expect) in [
            (r#"{"kind":"subagent-report"}"#, "missing field `v`"),
            (r#"{"v":"1"}"#, "v must be a non-negative integer"),
            (r#"{"v":-1}"#, "v must be a non-negative integer"),
            (r#"{"v":1.5}"#, "v must be a non-negative integer"),
            ("[1]", "expected a JSON object"),
            ("not json", "expected ident"),
            ("", "EOF"),
        ] {
            let err = decode_err(text.as_bytes());
            assert!(
                matches!(err, CoreError::InvalidPayload { .. }),
                "{text}: {err}"
            );
            let msg = err.to_string();
            assert!(msg.contains(expect), "{text}: {msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }

    #[test]
    fn n3_missing_fields_and_bad_ids_are_invalid_payloads() {
        let mut v = report_json();
        v.as_object_mut().unwrap().remove("seq");
        let msg = decode_err(v.to_string().as_bytes()).to_string();
        assert!(msg.contains("missing field `seq`"), "{msg}");
        let mut v = report_json();
        v["sender_session_id"] = json!("a.b\nc");
        let msg = decode_err(v.to_string().as_bytes()).to_string();
        assert!(msg.contains("session id") && !msg.contains('\n'), "{msg}");
        let mut v = report_json();
        v["delivery"] = json!("loud");
        assert!(decode_err(v.to_string().as_bytes())
            .to_string()
            .contains("unknown variant"));
    }

    #[test]
    fn n3_unknown_extra_fields_are_ignored_within_v1() {
        let mut v = report_json();
        v["priority"] = json!("high");
        assert_eq!(
            SubagentReport::decode(v.to_string().as_bytes()).unwrap(),
            report()
        );
    }

    #[test]
    fn m2_settled_summary_is_one_line() {
        let m = SubagentSettled::new(
            sid(CHILD),
            sid(PARENT),
            4,
            "done\nwith\r\n\tstyle\u{2028}ok",
            StopReason::Completed,
            None,
            9,
        );
        assert_eq!(m.summary.as_str(), "done with style ok");
        let mut v: serde_json::Value = serde_json::from_slice(&m.encode()).unwrap();
        v["summary"] = json!("two\nlines");
        let err = SubagentSettled::decode(v.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("summary must be one line"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn m1_inbox_message_dispatches_on_kind_and_dedups_on_sender_and_seq() {
        let r = InboxMessage::from(report());
        let back = InboxMessage::decode(&r.encode()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.dedup_id(), format!("{CHILD}-3"));
        assert_eq!(report().dedup_id(), back.dedup_id());
        assert_eq!(back.sender_session_id(), &sid(CHILD));
        assert_eq!(back.parent_session_id(), &sid(PARENT));
        assert_eq!((back.seq(), back.at_ms()), (3, 1));

        let s = InboxMessage::from(SubagentSettled::new(
            sid(CHILD),
            sid(PARENT),
            4,
            "x",
            StopReason::Failed,
            Some("boom".into()),
            2,
        ));
        let back = InboxMessage::decode(&s.encode()).unwrap();
        assert!(matches!(back, InboxMessage::Settled(_)));
        assert_eq!(back.dedup_id(), format!("{CHILD}-4"));

        let mut v = report_json();
        v["kind"] = json!("subagent-gossip");
        let err = InboxMessage::decode(v.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("inbox message") && err.contains("subagent-gossip"),
            "{err}"
        );
        v.as_object_mut().unwrap().remove("kind");
        let err = InboxMessage::decode(v.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("got nothing"), "{err}");
    }

    #[test]
    fn m1_inbox_message_serde_matches_encode_decode() {
        let r = InboxMessage::from(report());
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(text.as_bytes(), &r.encode()[..]);
        assert_eq!(serde_json::from_str::<InboxMessage>(&text).unwrap(), r);
        let mut v = report_json();
        v["form"] = json!("notice");
        assert!(serde_json::from_value::<InboxMessage>(v).is_err());
    }

    #[test]
    fn e1_end_pairs_with_start_by_run_id() {
        let s = start();
        let e = s.ended(StopReason::Completed, Some("done".into()), 9);
        assert_eq!(e.run_id, s.run_id);
        assert_eq!(
            (e.child_id.clone(), e.parent_session_id.clone()),
            (s.child_id.clone(), s.parent_session_id.clone())
        );
        let start_ev = LifecycleEvent::decode(&s.encode()).unwrap();
        let end_ev = LifecycleEvent::decode(&e.encode()).unwrap();
        assert!(matches!(start_ev, LifecycleEvent::Start(_)));
        assert!(matches!(end_ev, LifecycleEvent::End(_)));
        assert_eq!(start_ev.run_id(), end_ev.run_id());
        assert_eq!(start_ev.child_id(), end_ev.child_id());
        assert_eq!(start_ev.parent_session_id(), &sid(PARENT));
        assert_eq!(LifecycleEvent::from(e.clone()), end_ev);
        let mut v: serde_json::Value = serde_json::from_slice(&e.encode()).unwrap();
        v["event"] = json!("subagent/start");
        assert!(SubagentRunEndInfo::decode(v.to_string().as_bytes()).is_err());
        let err = LifecycleEvent::decode(br#"{"v":1,"event":"subagent/paused"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("lifecycle event") && err.contains("subagent/paused"),
            "{err}"
        );
    }

    #[test]
    fn m2_settlement_summary_is_one_line_and_bounded() {
        assert_eq!(
            settlement_summary("reviewer", StopReason::Completed, Some("LGTM\nship it")),
            "subagent reviewer completed: LGTM ship it"
        );
        assert_eq!(
            settlement_summary("reviewer", StopReason::Interrupted, None),
            "subagent reviewer was interrupted"
        );
        assert_eq!(
            settlement_summary("r", StopReason::MaxTurns, Some("  \n ")),
            "subagent r stopped at its turn limit"
        );
        let long = "é".repeat(500);
        let s = settlement_summary("r", StopReason::Failed, Some(&long));
        assert_eq!(s.chars().count(), MAX_SUMMARY_CHARS);
        assert!(s.ends_with('…') && s.starts_with("subagent r failed: éé"));
        assert!(!s.contains('\n'));
        let exact = "x".repeat(MAX_SUMMARY_CHARS - "subagent r failed: ".len());
        let s = settlement_summary("r", StopReason::Failed, Some(&exact));
        assert_eq!(s.chars().count(), MAX_SUMMARY_CHARS);
        assert!(!s.ends_with('…'));
    }

    #[test]
    fn m2_stop_reason_spellings_are_snake_case() {
        for r in [
            StopReason::Completed,
            StopReason::Failed,
            StopReason::Interrupted,
            StopReason::Disposed,
            StopReason::MaxTurns,
            StopReason::Deadline,
            StopReason::Budget,
        ] {
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.as_str())
            );
        }
        assert_eq!(StopReason::MaxTurns.as_str(), "max_turns");
        assert_eq!(
            serde_json::to_string(&Delivery::Wakeup).unwrap(),
            "\"wakeup\""
        );
    }
}
