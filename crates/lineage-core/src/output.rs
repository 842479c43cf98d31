//! A turn's output as it comes (F1): the wire payload of `lineage.<cluster>.session.<id>.output`.
//!
//! The hosting node publishes, for every turn of a session: a `turn-start` naming the followups
//! the turn took (their request ids), the assistant's text in `chunk`s as the agent streams it,
//! and a `turn-end` once the turn's end is durable in the log, with the whole reply (a driver
//! that does not stream, like the script driver, sends no chunk; a reader that missed chunks
//! still has the text). Core NATS, best effort: the log stays the record; this is the view of
//! whoever watches now (an ACP front door, `nats sub`).
//!
//! Each payload is one JSON object, `"v": 1` first, then `"kind"`:
//!
//! ```json
//! {"v":1,"kind":"turn-start","session_id":"…","turn":0,"request_ids":["…"],"at_ms":1}
//! {"v":1,"kind":"chunk","session_id":"…","turn":0,"seq":1,"text":"Hel"}
//! {"v":1,"kind":"turn-end","session_id":"…","turn":0,"outcome":"completed","reply":"Hello","at_ms":2}
//! ```
//!
//! Decoding checks `v` first ([`CoreError::UnsupportedVersion`]); anything else malformed is
//! [`CoreError::InvalidPayload`]. Unknown extra fields are ignored.

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::ids::SessionId;
use crate::messages::WIRE_VERSION;

/// How a turn ended, as the output stream tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnEndOutcome {
    /// The driver finished the turn.
    Completed,
    /// The turn failed (`error` says why).
    Failed,
    /// The turn was cancelled (an interrupt, a drain, `session/cancel`).
    Cancelled,
}

/// One message of a session's output stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TurnOutput {
    /// A turn began.
    TurnStart {
        /// The session.
        session_id: SessionId,
        /// The turn's index.
        turn: u64,
        /// The request ids of the followups this turn took, oldest first.
        #[serde(default)]
        request_ids: Vec<String>,
        /// When (ms since the epoch).
        at_ms: u64,
    },
    /// Assistant text, as the agent streamed it.
    Chunk {
        /// The session.
        session_id: SessionId,
        /// The turn's index.
        turn: u64,
        /// 1, 2, ... within the turn.
        seq: u64,
        /// The text.
        text: String,
    },
    /// A turn ended; its end is durable in the log.
    TurnEnd {
        /// The session.
        session_id: SessionId,
        /// The turn's index.
        turn: u64,
        /// How it ended.
        outcome: TurnEndOutcome,
        /// Failed turns: why, one line.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The reply the turn recorded, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply: Option<String>,
        /// The usage the agent last reported in the turn (context tokens, cumulative cost), if
        /// it reported any: what an editor shows as the session's `usage_update`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<crate::usage::SessionUsage>,
        /// When (ms since the epoch).
        at_ms: u64,
    },
}

#[derive(Serialize)]
struct WireOut<'a> {
    v: u64,
    #[serde(flatten)]
    event: &'a TurnOutput,
}

#[derive(Deserialize)]
struct VersionOnly {
    v: Option<serde_json::Value>,
}

impl TurnOutput {
    /// The session this message is about.
    pub fn session(&self) -> &SessionId {
        match self {
            TurnOutput::TurnStart { session_id, .. }
            | TurnOutput::Chunk { session_id, .. }
            | TurnOutput::TurnEnd { session_id, .. } => session_id,
        }
    }

    /// The JSON bytes, `"v": 1` first.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(&WireOut {
            v: WIRE_VERSION,
            event: self,
        })
        .unwrap_or_default()
    }

    /// Parses a payload: the version first, then the rest.
    pub fn decode(bytes: &[u8]) -> Result<Self, CoreError> {
        let version: VersionOnly =
            serde_json::from_slice(bytes).map_err(|e| CoreError::InvalidPayload {
                what: "turn output",
                reason: format!("{e}"),
            })?;
        match version.v {
            Some(serde_json::Value::Number(n)) if n.as_u64() == Some(WIRE_VERSION) => {}
            Some(serde_json::Value::Number(n)) if n.as_u64().is_some() => {
                return Err(CoreError::UnsupportedVersion {
                    what: "turn output",
                    found: n.as_u64().unwrap_or_default(),
                    supported: WIRE_VERSION,
                })
            }
            Some(other) => {
                return Err(CoreError::InvalidPayload {
                    what: "turn output",
                    reason: format!("`v` must be a number, found {other}"),
                })
            }
            None => {
                return Err(CoreError::InvalidPayload {
                    what: "turn output",
                    reason: "missing field `v`".into(),
                })
            }
        }
        serde_json::from_slice(bytes).map_err(|e| CoreError::InvalidPayload {
            what: "turn output",
            reason: format!("{e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid() -> SessionId {
        SessionId::parse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").expect("id")
    }

    #[test]
    fn f1_turn_output_bytes_are_pinned() {
        let start = TurnOutput::TurnStart {
            session_id: sid(),
            turn: 0,
            request_ids: vec!["r1".into()],
            at_ms: 1,
        };
        assert_eq!(
            String::from_utf8(start.encode()).expect("utf8"),
            r#"{"v":1,"kind":"turn-start","session_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","turn":0,"request_ids":["r1"],"at_ms":1}"#
        );
        let chunk = TurnOutput::Chunk {
            session_id: sid(),
            turn: 0,
            seq: 1,
            text: "Hel".into(),
        };
        assert_eq!(
            String::from_utf8(chunk.encode()).expect("utf8"),
            r#"{"v":1,"kind":"chunk","session_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","turn":0,"seq":1,"text":"Hel"}"#
        );
        let end = TurnOutput::TurnEnd {
            usage: None,
            session_id: sid(),
            turn: 0,
            outcome: TurnEndOutcome::Completed,
            error: None,
            reply: Some("Hello".into()),
            at_ms: 2,
        };
        assert_eq!(
            String::from_utf8(end.encode()).expect("utf8"),
            r#"{"v":1,"kind":"turn-end","session_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","turn":0,"outcome":"completed","reply":"Hello","at_ms":2}"#
        );
        for m in [start, chunk, end] {
            assert_eq!(TurnOutput::decode(&m.encode()).expect("decode"), m);
        }
    }

    #[test]
    fn f1_turn_output_refuses_other_versions_and_garbage() {
        let v2 = br#"{"v":2,"kind":"chunk","session_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","turn":0,"seq":1,"text":"x"}"#;
        assert!(matches!(
            TurnOutput::decode(v2),
            Err(CoreError::UnsupportedVersion { .. })
        ));
        let bad_id = br#"{"v":1,"kind":"chunk","session_id":"a.b","turn":0,"seq":1,"text":"x"}"#;
        assert!(matches!(
            TurnOutput::decode(bad_id),
            Err(CoreError::InvalidPayload { .. })
        ));
        assert!(matches!(
            TurnOutput::decode(b"{"),
            Err(CoreError::InvalidPayload { .. })
        ));
        assert!(matches!(
            TurnOutput::decode(br#"{"kind":"chunk"}"#),
            Err(CoreError::InvalidPayload { .. })
        ));
    }
}
