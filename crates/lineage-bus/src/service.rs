//! Replies of lineage's NATS micro services (issue 15, O3, N3): an error reply carries the
//! micro protocol's `Nats-Service-Error` and `Nats-Service-Error-Code` headers, so `nats micro
//! stats` counts it, and keeps its body, the one-line JSON error every client reads.
//!
//! async-nats 0.42 counts an endpoint's errors (`num_errors`, `last_error` of `$SRV.STATS`)
//! only in `service::Request::respond(Err(..))`, and that call sends the two headers with an
//! *empty* body; the counters are private to the crate. So [`respond`] sends the whole reply
//! itself (headers and body) to the request's reply subject, then lets async-nats count the
//! error by calling `respond(Err(..))` with the request's reply subject pointed at a sink
//! ([`Sink`]): a subject of the serving process's own namespace that nobody subscribes to, so
//! the crate's empty copy goes nowhere (the server drops a message without interest). The
//! client gets exactly one message; `$SRV.STATS` counts the request once and the error once.
//! Hand-rolling `$SRV.PING`/`INFO`/`STATS` instead would duplicate the micro protocol the crate
//! already speaks.

use async_nats::service::error::Error as MicroError;
use async_nats::service::{Request, NATS_SERVICE_ERROR, NATS_SERVICE_ERROR_CODE};
use async_nats::HeaderMap;
use lineage_protocol::envelope::{ControlError, ErrorCode};
use serde::Deserialize;

use crate::error::BusError;

/// The longest `Nats-Service-Error` header value sent, in bytes (the body has the whole
/// message).
pub const MAX_DESCRIPTION_BYTES: usize = 1024;

/// What an error reply says in its headers: `Nats-Service-Error-Code` and `Nats-Service-Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceFailure {
    /// The numeric code (HTTP-like; [`status_code`] for the control service's codes).
    pub code: u16,
    /// One line saying what failed.
    pub description: String,
}

impl ServiceFailure {
    /// A failure with `code` and `description` (control characters become spaces, and it is
    /// cut to [`MAX_DESCRIPTION_BYTES`] at a character boundary: a header value is one line).
    pub fn new(code: u16, description: &str) -> Self {
        let mut line: String = description
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if line.len() > MAX_DESCRIPTION_BYTES {
            let mut end = MAX_DESCRIPTION_BYTES;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
        }
        ServiceFailure {
            code,
            description: line,
        }
    }
}

impl From<&ControlError> for ServiceFailure {
    fn from(e: &ControlError) -> Self {
        ServiceFailure::new(status_code(e.code), &e.message)
    }
}

/// The `Nats-Service-Error-Code` of a control error code: `bad_request` 400, `not_found` 404,
/// `refused` 409 (the request is well formed but a rule or the cluster's state refuses it:
/// closed admission, depth, fan-out, budget, authority), `unavailable` 503, `internal` 500.
pub fn status_code(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::BadRequest => 400,
        ErrorCode::NotFound => 404,
        ErrorCode::Refused => 409,
        ErrorCode::Unavailable => 503,
        ErrorCode::Internal => 500,
    }
}

/// The failure a control reply body reports: `None` for a result (`{"v":1,"result":...}`) or a
/// body that is no envelope, the error's code and message for `{"v":1,"error":{...}}`.
pub fn control_failure(body: &[u8]) -> Option<ServiceFailure> {
    // `encode_reply` writes `v` first, then `result` or `error`: a result is known without
    // parsing it (replies such as a drain report can be large).
    const RESULT: &[u8] = br#"{"v":1,"result":"#;
    if body.starts_with(RESULT) {
        return None;
    }
    #[derive(Deserialize)]
    struct Peek {
        #[serde(default)]
        error: Option<ControlError>,
    }
    let peek: Peek = serde_json::from_slice(body).ok()?;
    peek.error.as_ref().map(ServiceFailure::from)
}

/// The subject an error reply's uncounted copy is sent to (see the module doc): a subject the
/// serving process may publish to (its own namespace) and nobody subscribes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sink(pub String);

/// Answers `request` with `body`: a plain reply when `failure` is `None`, else the same body
/// with the `Nats-Service-Error` and `Nats-Service-Error-Code` headers, counted as an error of
/// its endpoint in `$SRV.STATS`. A request without a reply subject (a plain publish) is not
/// answered.
pub async fn respond(
    client: &async_nats::Client,
    mut request: Request,
    body: Vec<u8>,
    failure: Option<ServiceFailure>,
    sink: &Sink,
) -> Result<(), BusError> {
    let failed = |e: async_nats::PublishError| BusError::Nats {
        op: "send a service reply",
        reason: e.to_string(),
    };
    let Some(reply) = request.message.reply.clone() else {
        return Ok(());
    };
    let Some(failure) = failure else {
        return request.respond(Ok(body.into())).await.map_err(failed);
    };
    let mut headers = HeaderMap::new();
    headers.insert(NATS_SERVICE_ERROR, failure.description.as_str());
    headers.insert(NATS_SERVICE_ERROR_CODE, failure.code.to_string().as_str());
    client
        .publish_with_headers(reply, headers, body.into())
        .await
        .map_err(failed)?;
    // async-nats counts the error (and the request) here; its own reply, headers and an empty
    // body, goes to the sink instead of the client.
    request.message.reply = Some(sink.0.clone().into());
    if let Err(e) = request
        .respond(Err(MicroError {
            status: failure.description,
            code: usize::from(failure.code),
        }))
        .await
    {
        tracing::debug!(error = %e, sink = %sink.0, "the counted copy of an error reply was not sent");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lineage_protocol::envelope::encode_reply;

    #[test]
    fn o3_control_failure_reads_the_error_of_an_envelope_only() {
        let ok = encode_reply::<serde_json::Value>(&Ok(serde_json::json!({"error": "x"})));
        assert_eq!(control_failure(&ok), None);
        for (code, status) in [
            (ErrorCode::BadRequest, 400),
            (ErrorCode::NotFound, 404),
            (ErrorCode::Refused, 409),
            (ErrorCode::Unavailable, 503),
            (ErrorCode::Internal, 500),
        ] {
            let body = encode_reply::<()>(&Err(ControlError::new(code, "no such session")));
            assert_eq!(
                control_failure(&body),
                Some(ServiceFailure {
                    code: status,
                    description: "no such session".into()
                }),
                "{code:?}"
            );
        }
        // Not from encode_reply, but an envelope with an error all the same.
        let body = br#"{ "error": {"code":"refused","message":"closed"}, "v": 1 }"#;
        assert_eq!(control_failure(body).map(|f| f.code), Some(409));
        assert_eq!(control_failure(b"not json"), None);
    }

    #[test]
    fn o3_a_header_description_is_one_bounded_line() {
        let f = ServiceFailure::new(500, "a\r\nb\tc");
        assert_eq!(f.description, "a  b c");
        let long = "é".repeat(MAX_DESCRIPTION_BYTES);
        let f = ServiceFailure::new(500, &long);
        assert!(f.description.len() <= MAX_DESCRIPTION_BYTES);
        assert!(f.description.len() > MAX_DESCRIPTION_BYTES - 2);
    }
}
