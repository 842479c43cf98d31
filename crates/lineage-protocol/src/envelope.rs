//! The control envelope (N3): every reply of the `lineage` service is versioned JSON, either
//! `{"v":1,"result":...}` or `{"v":1,"error":{"code":"...","message":"..."}}`; the error codes
//! and what the CLI exits with for each; and the routing header a forwarding node sets.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The NATS header a node sets on a request it forwards to the node hosting the session
/// (value `1`). A forwarded request is served where it lands, never forwarded again. Routing is
/// not part of any body: clients never set it.
pub const FORWARDED_HEADER: &str = "Lineage-Forwarded";

/// How a request reached the node serving it (read from [`FORWARDED_HEADER`] by the service).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hop {
    /// Straight from a client: it may be forwarded once to the node that hosts the session.
    #[default]
    Client,
    /// Forwarded by another node: serve it here, never forward it again.
    Forwarded,
}

impl Hop {
    /// The hop a request's [`FORWARDED_HEADER`] value says (`None`: no header). Any value but
    /// `1` is read as absent: the request came from a client.
    pub fn from_header(value: Option<&str>) -> Self {
        match value.map(str::trim) {
            Some("1") => Hop::Forwarded,
            Some(_) | None => Hop::Client,
        }
    }

    /// True for [`Hop::Forwarded`].
    pub fn is_forwarded(self) -> bool {
        match self {
            Hop::Forwarded => true,
            Hop::Client => false,
        }
    }
}

/// The NATS header a client sets to ask the serving node for heartbeats while it works on the
/// request (value: the interval in milliseconds, [`HEARTBEAT_MIN_MS`] to [`HEARTBEAT_MAX_MS`]).
/// The node then sends an empty message with [`STATUS_HEADER`]` = `[`STATUS_WORKING`] to the
/// request's reply subject at once and every interval until the reply, so a client can tell a
/// slow operation (heartbeats) from a node that is not running (silence) and retry elsewhere.
/// Without the header (natscli, `nats req`) the reply is the only message.
pub const HEARTBEAT_HEADER: &str = "Lineage-Heartbeat";

/// The header that marks a heartbeat ([`HEARTBEAT_HEADER`]); a reply never carries it.
pub const STATUS_HEADER: &str = "Lineage-Status";

/// The [`STATUS_HEADER`] value of a heartbeat.
pub const STATUS_WORKING: &str = "working";

/// The shortest heartbeat interval a node honours.
pub const HEARTBEAT_MIN_MS: u64 = 50;

/// The longest heartbeat interval a node honours.
pub const HEARTBEAT_MAX_MS: u64 = 10_000;

/// The heartbeat interval a [`HEARTBEAT_HEADER`] value asks for: `None` when the value is not
/// a whole number of milliseconds in [`HEARTBEAT_MIN_MS`]..=[`HEARTBEAT_MAX_MS`] (then no
/// heartbeats are sent, and the request is served as if the header were absent).
pub fn heartbeat_interval(value: Option<&str>) -> Option<std::time::Duration> {
    let ms: u64 = value?.trim().parse().ok()?;
    (HEARTBEAT_MIN_MS..=HEARTBEAT_MAX_MS)
        .contains(&ms)
        .then(|| std::time::Duration::from_millis(ms))
}

/// The service name every node registers (`nats micro ls`).
pub const SERVICE_NAME: &str = "lineage";

/// Wire version of control envelopes.
pub const CONTROL_VERSION: u64 = 1;

/// Why a control request failed; the CLI maps each to its own exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request was malformed or invalid (exit 2).
    BadRequest,
    /// A named session or node does not exist (exit 3).
    NotFound,
    /// A rule refused it: closed admission, depth, authority (exit 4).
    Refused,
    /// The cluster could not serve it now: no leader, no node, timeout (exit 5).
    Unavailable,
    /// A bug or an unexpected failure (exit 1).
    Internal,
}

impl ErrorCode {
    /// The process exit code the CLI uses for this error.
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorCode::BadRequest => 2,
            ErrorCode::NotFound => 3,
            ErrorCode::Refused => 4,
            ErrorCode::Unavailable => 5,
            ErrorCode::Internal => 1,
        }
    }
}

/// A failed control request: a code and one line saying what was wrong and what to do.
#[derive(
    Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error, schemars::JsonSchema,
)]
#[error("{message}")]
pub struct ControlError {
    /// The class of failure.
    pub code: ErrorCode,
    /// One line.
    pub message: String,
    /// Set only on an `unavailable` refusal that changed nothing and is expected to pass soon
    /// (like HTTP 503's `Retry-After`): the milliseconds after which the same request, sent
    /// again with its request id, may be served. A node sets it when it cannot renew its lease
    /// and so takes no message for a session it hosts (K1); `ControlClient` waits this long and
    /// sends a call that is safe to repeat again, within its deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl ControlError {
    /// Builds an error; newlines in `message` are folded so it stays one line.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let message: String = message.into();
        ControlError {
            code,
            message: message.replace(['\n', '\r'], " "),
            retry_after_ms: None,
        }
    }

    /// The same error with a retry hint ([`ControlError::retry_after_ms`]).
    pub fn with_retry_after(self, after: std::time::Duration) -> Self {
        ControlError {
            retry_after_ms: Some(u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
            ..self
        }
    }

    /// The retry hint, if the server gave one.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.retry_after_ms.map(std::time::Duration::from_millis)
    }
}

/// The reply envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
pub struct Reply<T> {
    /// Always [`CONTROL_VERSION`].
    pub v: u64,
    /// Present on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<T>,
    /// Present on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ControlError>,
}

/// Encodes a handler's outcome as a reply body.
pub fn encode_reply<T: Serialize>(outcome: &Result<T, ControlError>) -> Vec<u8> {
    let body = match outcome {
        Ok(result) => serde_json::to_vec(&Reply {
            v: CONTROL_VERSION,
            result: Some(result),
            error: None,
        }),
        Err(error) => serde_json::to_vec(&Reply::<&T> {
            v: CONTROL_VERSION,
            result: None,
            error: Some(error.clone()),
        }),
    };
    body.unwrap_or_else(|e| {
        format!(r#"{{"v":1,"error":{{"code":"internal","message":"cannot encode reply: {e}"}}}}"#)
            .into_bytes()
    })
}

/// Where the JSON shape of `op`'s request is written down: its endpoint's `request_schema`
/// metadata (every op has one, `crate::schema`), and the CLI verb that sends it, when there is
/// one (the followup op's verb is `send`; issue 15 found errors naming `lineage followup`).
fn shape_hint(op: &str) -> String {
    use crate::control::ops;
    let verb = match op {
        ops::SPAWN | ops::INTERRUPT | ops::DRAIN | ops::STATUS | ops::AGENTS => Some(op),
        ops::FOLLOWUP => Some("send"),
        _ => None,
    };
    let schema = "the request_schema of its endpoint (`nats micro info lineage --json`)";
    match verb {
        Some(verb) => format!("the JSON shape is {schema}; `lineage {verb} --help` sends it"),
        None => format!("the JSON shape is {schema}"),
    }
}

/// Decodes a request body, mapping malformed JSON to a `bad_request` error naming the op. A
/// body is a JSON object (an empty body reads as `{}`): anything else is refused before serde
/// sees it, which would take an array for a struct with no fields (issue 12's fuzzing found
/// `[]` answered as a valid `status`).
pub fn decode_request<T: DeserializeOwned>(op: &str, body: &[u8]) -> Result<T, ControlError> {
    let body = match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => b"{}".as_slice(),
        Some(b'{') => body,
        Some(_) => {
            return Err(ControlError::new(
                ErrorCode::BadRequest,
                format!(
                    "malformed {op} request: the body must be a JSON object ({{...}}); {}",
                    shape_hint(op)
                ),
            ))
        }
    };
    serde_json::from_slice(body).map_err(|e| {
        ControlError::new(
            ErrorCode::BadRequest,
            format!("malformed {op} request: {e}; {}", shape_hint(op)),
        )
    })
}

/// Decodes a request body like [`decode_request`], and says how it reached this node: `hop` is
/// what the [`FORWARDED_HEADER`] said. A body from an older client or node may still carry the
/// retired `"forwarded"` field: it is removed before decoding (`false` changes nothing; `true`,
/// from an older forwarding node, counts as [`Hop::Forwarded`]); a non-boolean value is a
/// `bad_request`.
pub fn decode_routed_request<T: DeserializeOwned>(
    op: &str,
    body: &[u8],
    hop: Hop,
) -> Result<(T, Hop), ControlError> {
    const LEGACY: &[u8] = b"\"forwarded\"";
    if !body.windows(LEGACY.len()).any(|w| w == LEGACY) {
        return decode_request(op, body).map(|request| (request, hop));
    }
    let mut value: serde_json::Value = decode_request(op, body)?;
    let legacy = match value.as_object_mut().map(|o| o.remove("forwarded")) {
        Some(Some(serde_json::Value::Bool(flag))) => flag,
        Some(Some(other)) => {
            return Err(ControlError::new(
                ErrorCode::BadRequest,
                format!(
                    "malformed {op} request: \"forwarded\" is {other}, not a boolean; drop the field (routing is the {FORWARDED_HEADER} header now)"
                ),
            ))
        }
        Some(None) | None => false,
    };
    let request = serde_json::from_value(value).map_err(|e| {
        ControlError::new(
            ErrorCode::BadRequest,
            format!("malformed {op} request: {e}; {}", shape_hint(op)),
        )
    })?;
    let hop = match (hop, legacy) {
        (Hop::Forwarded, _) | (Hop::Client, true) => Hop::Forwarded,
        (Hop::Client, false) => Hop::Client,
    };
    Ok((request, hop))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g3_heartbeat_interval_is_honoured_only_in_range() {
        use std::time::Duration;
        assert_eq!(
            heartbeat_interval(Some("500")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            heartbeat_interval(Some(" 50 ")),
            Some(Duration::from_millis(50))
        );
        assert_eq!(
            heartbeat_interval(Some("10000")),
            Some(Duration::from_secs(10))
        );
        for bad in [
            "",
            "0",
            "49",
            "10001",
            "-1",
            "1.5",
            "1e3",
            "fast",
            "18446744073709551616",
        ] {
            assert_eq!(heartbeat_interval(Some(bad)), None, "{bad:?}");
        }
        assert_eq!(heartbeat_interval(None), None);
    }

    #[test]
    fn n3_reply_envelopes_are_pinned() {
        let ok: Result<u32, ControlError> = Ok(7);
        assert_eq!(encode_reply(&ok), br#"{"v":1,"result":7}"#);
        let err: Result<u32, ControlError> = Err(ControlError::new(
            ErrorCode::Refused,
            "admission closed\nunder X",
        ));
        assert_eq!(
            String::from_utf8(encode_reply(&err)).unwrap(),
            r#"{"v":1,"error":{"code":"refused","message":"admission closed under X"}}"#
        );
    }

    #[test]
    fn n3_malformed_request_is_a_bad_request_naming_the_op() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Spawn {
            prompt: String,
        }
        let err = decode_request::<Spawn>("spawn", b"{not json").unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest);
        assert!(err.message.starts_with("malformed spawn request"));
        assert!(!err.message.contains('\n'));
        assert!(
            err.message.ends_with("`lineage spawn --help` sends it"),
            "{}",
            err.message
        );
        let err = decode_request::<Spawn>("followup", b"{not json").unwrap_err();
        assert!(
            err.message.contains("`lineage send --help`"),
            "{}",
            err.message
        );
        assert!(!err.message.contains("lineage followup"), "{}", err.message);
        let err = decode_request::<Spawn>("start", b"{not json").unwrap_err();
        assert!(
            err.message.ends_with("(`nats micro info lineage --json`)"),
            "{}",
            err.message
        );
    }

    #[test]
    fn n3_a_request_body_is_an_object_or_empty() {
        #[derive(Debug, Deserialize)]
        struct Status {}
        for bad in [&b"[]"[..], b" [ ] ", b"1", b"null", b"\"{}\""] {
            let err = decode_request::<Status>("status", bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadRequest);
            assert!(
                err.message
                    .starts_with("malformed status request: the body must be a JSON object"),
                "{}",
                err.message
            );
        }
        for good in [&b""[..], b"  ", b"{}", b" {} "] {
            assert!(decode_request::<Status>("status", good).is_ok());
        }
    }

    #[test]
    fn exit_codes_are_distinct() {
        let codes: std::collections::HashSet<i32> = [
            ErrorCode::BadRequest,
            ErrorCode::NotFound,
            ErrorCode::Refused,
            ErrorCode::Unavailable,
            ErrorCode::Internal,
        ]
        .iter()
        .map(|c| c.exit_code())
        .collect();
        assert_eq!(codes.len(), 5);
    }
}
