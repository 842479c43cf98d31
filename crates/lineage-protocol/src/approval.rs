//! Approvals through the front door (C2, C4): a hosted top-level agent's permission request,
//! asked of the person behind the editor that opened the session (`lineage acp`).
//!
//! A root whose policy has an approval service (`has_approval_service`: the front door spawns
//! its sessions so) has its agent's `session/request_permission` sent as an
//! [`ApprovalRequest`] on `lineage.<cluster>.session.<root>.approval` (core NATS request and
//! reply); the front door that holds the root asks its editor and answers an
//! [`ApprovalReply`] with the option the person picked, or none. No answer by the request's
//! deadline, or none at all, is a refusal. A delegated child never asks (its approval policy is
//! `never`): lineage's own rule answers it.
//!
//! ```json
//! {"v":1,"session":"0190…","title":"rm -rf build","tool_kind":"execute","options":[{"id":"allow","name":"Allow","kind":"allow_once"},{"id":"reject","name":"Reject","kind":"reject_once"}],"timeout_ms":120000}
//! {"v":1,"option":"allow"}
//! ```

use lineage_core::ids::SessionId;
use serde::{Deserialize, Serialize};

use crate::error::ProtocolError;

/// The only version of these bodies.
pub const APPROVAL_VERSION: u8 = 1;

/// One choice the agent offers, as the ACP `PermissionOption` has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalOption {
    /// The option's id (what the answer names).
    pub id: String,
    /// Its label for a person.
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub kind: String,
}

/// A hosted root's permission request, asked of the person behind its editor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Always [`APPROVAL_VERSION`].
    pub v: u8,
    /// The session whose agent asks.
    pub session: SessionId,
    /// What the agent wants to do, in its words (the tool call's title).
    pub title: String,
    /// The tool call's kind (`execute`, `edit`, `other`, ...), when the agent says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_kind: Option<String>,
    /// The choices.
    pub options: Vec<ApprovalOption>,
    /// How long the node waits for the answer; after that it refuses.
    pub timeout_ms: u64,
}

/// The answer: the option picked, or none (a refusal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalReply {
    /// Always [`APPROVAL_VERSION`].
    pub v: u8,
    /// The id of the option the person picked; `None`: refused or dismissed.
    pub option: Option<String>,
}

impl ApprovalRequest {
    /// Reads a request; a wrong version or malformed body is a one-line error.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtocolError> {
        let request: ApprovalRequest = serde_json::from_slice(bytes).map_err(|e| {
            ProtocolError::Malformed(format!("approval request: {e}; expected {{\"v\":1,\"session\":…,\"title\":…,\"options\":[…],\"timeout_ms\":…}}"))
        })?;
        check_version(request.v)?;
        Ok(request)
    }
}

impl ApprovalReply {
    /// Reads a reply; a wrong version or malformed body is a one-line error.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtocolError> {
        let reply: ApprovalReply = serde_json::from_slice(bytes).map_err(|e| {
            ProtocolError::Malformed(format!(
                "approval reply: {e}; expected {{\"v\":1,\"option\":\"<id>\"|null}}"
            ))
        })?;
        check_version(reply.v)?;
        Ok(reply)
    }
}

fn check_version(v: u8) -> Result<(), ProtocolError> {
    match v {
        APPROVAL_VERSION => Ok(()),
        other => Err(ProtocolError::Malformed(format!(
            "approval body version {other}; this lineage reads version {APPROVAL_VERSION}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c4_approval_bodies_are_pinned_and_bad_ones_refused_in_one_line() {
        let request = ApprovalRequest {
            v: 1,
            session: SessionId::parse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").unwrap(),
            title: "rm -rf build".into(),
            tool_kind: Some("execute".into()),
            options: vec![ApprovalOption {
                id: "allow".into(),
                name: "Allow".into(),
                kind: "allow_once".into(),
            }],
            timeout_ms: 1000,
        };
        let bytes = serde_json::to_vec(&request).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            r#"{"v":1,"session":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","title":"rm -rf build","tool_kind":"execute","options":[{"id":"allow","name":"Allow","kind":"allow_once"}],"timeout_ms":1000}"#
        );
        assert_eq!(ApprovalRequest::decode(&bytes).unwrap(), request);
        let reply = ApprovalReply::decode(br#"{"v":1,"option":null}"#).unwrap();
        assert_eq!(reply.option, None);
        for bad in [
            &br#"{"v":2,"option":null}"#[..],
            b"not json",
            br#"{"v":1,"option":5}"#,
        ] {
            let e = ApprovalReply::decode(bad).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
