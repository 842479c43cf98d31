//! The `lineage` NATS micro service's envelopes (N3): every reply is versioned JSON, either
//! `{"v":1,"result":...}` or `{"v":1,"error":{"code":"...","message":"..."}}`.
//!
//! `nats micro ls` lists one `lineage` instance per node; `nats req lineage.<cluster>.ctl.status
//! '{}'` answers from any node. Request bodies are defined by the host; this module gives the
//! envelope, error codes and a typed request helper shared by the node and the CLI.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::BusError;
use crate::trace::TraceContext;

/// The service name every node registers (`nats micro ls`).
pub const SERVICE_NAME: &str = "lineage";

/// Wire version of control envelopes.
pub const CONTROL_VERSION: u64 = 1;

/// Why a control request failed; the CLI maps each to its own exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ControlError {
    /// The class of failure.
    pub code: ErrorCode,
    /// One line.
    pub message: String,
}

impl ControlError {
    /// Builds an error; newlines in `message` are folded so it stays one line.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let message: String = message.into();
        ControlError {
            code,
            message: message.replace(['\n', '\r'], " "),
        }
    }
}

/// The reply envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// Decodes a request body, mapping malformed JSON to a `bad_request` error naming the op.
pub fn decode_request<T: DeserializeOwned>(op: &str, body: &[u8]) -> Result<T, ControlError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| {
        ControlError::new(
            ErrorCode::BadRequest,
            format!("malformed {op} request: {e}; see `lineage {op} --help` for the JSON shape"),
        )
    })
}

/// Sends a control request and decodes the reply envelope. The trace context of the operation
/// this task serves ([`crate::trace::current`]), if any, goes along as the `traceparent` header.
pub async fn request<Req: Serialize, Res: DeserializeOwned>(
    client: &async_nats::Client,
    subject: String,
    body: &Req,
    timeout: Duration,
) -> Result<Res, ControlError> {
    request_traced(client, subject, body, timeout, crate::trace::current()).await
}

/// [`request`] with an explicit trace context (`None`: no `traceparent` header).
pub async fn request_traced<Req: Serialize, Res: DeserializeOwned>(
    client: &async_nats::Client,
    subject: String,
    body: &Req,
    timeout: Duration,
    trace: Option<TraceContext>,
) -> Result<Res, ControlError> {
    let payload = serde_json::to_vec(body).map_err(|e| {
        ControlError::new(ErrorCode::BadRequest, format!("cannot encode request: {e}"))
    })?;
    // The client's own request timeout (10 s by default) must not cut a longer deadline short:
    // the request carries `timeout` itself, and the outer timeout is the same deadline.
    let mut request = async_nats::client::Request::new()
        .payload(payload.into())
        .timeout(Some(timeout));
    if let Some(ctx) = trace {
        let mut headers = async_nats::HeaderMap::new();
        ctx.inject(&mut headers);
        request = request.headers(headers);
    }
    let send = client.send_request(subject.clone(), request);
    let reply = tokio::time::timeout(timeout + Duration::from_millis(250), send)
        .await
        .map_err(|_| {
            ControlError::new(
                ErrorCode::Unavailable,
                format!(
                    "no reply on {subject} within {} ms; is a lineage node running for this cluster?",
                    timeout.as_millis()
                ),
            )
        })?
        .map_err(|e| {
            let why = match e.kind() {
                async_nats::client::RequestErrorKind::TimedOut => {
                    format!("no reply on {subject} within {} ms", timeout.as_millis())
                }
                async_nats::client::RequestErrorKind::NoResponders => {
                    format!("nobody serves {subject}")
                }
                async_nats::client::RequestErrorKind::Other => {
                    format!("request on {subject} failed: {e}")
                }
            };
            ControlError::new(
                ErrorCode::Unavailable,
                format!("{why}; is a lineage node running for this cluster?"),
            )
        })?;
    let envelope: Reply<Res> = serde_json::from_slice(&reply.payload).map_err(|e| {
        ControlError::new(
            ErrorCode::Internal,
            format!("malformed reply on {subject}: {e}"),
        )
    })?;
    match (envelope.result, envelope.error) {
        (_, Some(error)) => Err(error),
        (Some(result), None) => Ok(result),
        (None, None) => Err(ControlError::new(
            ErrorCode::Internal,
            format!("empty reply on {subject}"),
        )),
    }
}

impl From<BusError> for ControlError {
    fn from(e: BusError) -> Self {
        let code = match &e {
            BusError::Connect { .. } | BusError::Timeout { .. } | BusError::JetStream { .. } => {
                ErrorCode::Unavailable
            }
            BusError::Nats { .. } => ErrorCode::Unavailable,
            BusError::InvalidCluster { .. }
            | BusError::Config(_)
            | BusError::Json { .. }
            | BusError::Core(_) => ErrorCode::BadRequest,
            BusError::LogConflict { .. } | BusError::StreamReplicas { .. } => ErrorCode::Refused,
        };
        ControlError::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
