//! What travels on a subject, told apart by `kind`: [`InboxMessage`] (a parent's inbox: a
//! report or a settlement notice, M1, M2) and [`LifecycleEvent`] (`subagent/start` and
//! `subagent/end`, E1).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::*;

/// Anything that arrives in a parent's inbox (M1, M2), told apart by `kind`; its serde form is
/// the payload's envelope (`v`, literals, fields).
#[derive(Debug, Clone, PartialEq, Eq)]
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

impl Serialize for InboxMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            InboxMessage::Report(m) => super::wire::Outgoing::of(m).serialize(s),
            InboxMessage::Settled(m) => super::wire::Outgoing::of(m).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for InboxMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        inbox_from_value(value).map_err(de::Error::custom)
    }
}

/// A child's lifecycle event (E1), told apart by `event`; its serde form is the payload's
/// envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
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

impl Serialize for LifecycleEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            LifecycleEvent::Start(e) => super::wire::Outgoing::of(e).serialize(s),
            LifecycleEvent::End(e) => super::wire::Outgoing::of(e).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for LifecycleEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        lifecycle_from_value(value).map_err(de::Error::custom)
    }
}
