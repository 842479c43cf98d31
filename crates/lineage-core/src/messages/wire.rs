//! The payloads as they travel: one private `*Wire` struct per payload, with its version
//! (`v: 1`), its `kind` and its relay form, and the `From` conversions both ways (the public
//! types in [`super`] serialize through them).

use serde::{Deserialize, Serialize};

use super::*;

/// `SubagentReport` as it travels.
#[derive(Serialize, Deserialize)]
pub(super) struct ReportWire {
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
pub(super) struct SettledWire {
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
pub(super) struct StartWire {
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
pub(super) struct EndWire {
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
