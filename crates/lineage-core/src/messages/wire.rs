//! The one versioned envelope every payload travels in: `{"v": 1, <its literal fields>, <its
//! fields>}`. A payload type ([`Payload`]) names its literal fields (a zero-sized marker per
//! field, written on encode and checked on decode) and serializes its own fields; the envelope
//! puts `v` first. There is no second copy of any payload's fields.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::*;

/// A payload that travels in the [`Outgoing`] / [`Incoming`] envelope.
pub(super) trait Payload: Serialize + DeserializeOwned {
    /// Its literal fields (`kind` and `form`, or `event`).
    type Literals: Serialize + DeserializeOwned + Default;
    /// What an error calls it, e.g. `subagent-report`.
    const WHAT: &'static str;
}

/// A payload on its way out: `v`, then its literals, then its fields (in that order on the
/// wire, so `nats sub` shows `"v": 1` first).
#[derive(Serialize)]
pub(super) struct Outgoing<'a, T: Payload> {
    v: V1,
    #[serde(flatten)]
    literals: T::Literals,
    #[serde(flatten)]
    body: &'a T,
}

impl<'a, T: Payload> Outgoing<'a, T> {
    /// `body` in its envelope.
    pub(super) fn of(body: &'a T) -> Self {
        Outgoing {
            v: V1,
            literals: T::Literals::default(),
            body,
        }
    }
}

/// A payload on its way in: the version and literals are checked by their markers' serde;
/// unknown extra fields are ignored (version 1 can gain optional fields).
#[derive(Deserialize)]
#[serde(bound = "")]
pub(super) struct Incoming<T: Payload> {
    #[allow(dead_code)]
    v: V1,
    #[serde(flatten)]
    #[allow(dead_code)]
    literals: T::Literals,
    #[serde(flatten)]
    pub(super) body: T,
}

/// A report's literals: `"kind": "subagent-report", "form": "relay"`.
#[derive(Default, Serialize, Deserialize)]
pub(super) struct ReportLiterals {
    kind: ReportKind,
    form: RelayForm,
}

/// A settlement notice's literals: `"kind": "subagent-settled", "form": "notice"`.
#[derive(Default, Serialize, Deserialize)]
pub(super) struct SettledLiterals {
    kind: SettledKind,
    form: NoticeForm,
}

/// `subagent/start`'s literal: `"event": "subagent/start"`.
#[derive(Default, Serialize, Deserialize)]
pub(super) struct StartLiterals {
    event: StartEvent,
}

/// `subagent/end`'s literal: `"event": "subagent/end"`.
#[derive(Default, Serialize, Deserialize)]
pub(super) struct EndLiterals {
    event: EndEvent,
}

impl Payload for SubagentReport {
    type Literals = ReportLiterals;
    const WHAT: &'static str = REPORT_KIND;
}

impl Payload for SubagentSettled {
    type Literals = SettledLiterals;
    const WHAT: &'static str = SETTLED_KIND;
}

impl Payload for SubagentRunInfo {
    type Literals = StartLiterals;
    const WHAT: &'static str = START_EVENT;
}

impl Payload for SubagentRunEndInfo {
    type Literals = EndLiterals;
    const WHAT: &'static str = END_EVENT;
}
