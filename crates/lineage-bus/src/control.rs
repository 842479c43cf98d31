//! The `lineage` NATS micro service's envelopes (N3): every reply is versioned JSON, either
//! `{"v":1,"result":...}` or `{"v":1,"error":{"code":"...","message":"..."}}`.
//!
//! `nats micro ls` lists one `lineage` instance per node; `nats req lineage.<cluster>.ctl.status
//! '{}'` answers from any node. The envelope, error codes and bodies are `lineage_protocol`'s
//! (re-exported here); this module is the request helper over NATS shared by the node and
//! [`crate::client::ControlClient`].

use std::time::Duration;

use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::BusError;
use crate::trace::TraceContext;

pub use lineage_protocol::envelope::{
    decode_request, decode_routed_request, encode_reply, heartbeat_interval, ControlError,
    ErrorCode, Hop, Reply, CONTROL_VERSION, FORWARDED_HEADER, HEARTBEAT_HEADER, SERVICE_NAME,
    STATUS_HEADER, STATUS_WORKING,
};

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
    request_with(client, subject, body, timeout, trace, Hop::Client).await
}

/// [`request_traced`] that also says how the request travels: [`Hop::Forwarded`] sets the
/// [`FORWARDED_HEADER`] (a node forwarding a request to the node hosting its session).
pub async fn request_with<Req: Serialize, Res: DeserializeOwned>(
    client: &async_nats::Client,
    subject: String,
    body: &Req,
    timeout: Duration,
    trace: Option<TraceContext>,
    hop: Hop,
) -> Result<Res, ControlError> {
    let payload = encode_request(body)?;
    let reply = request_bytes(client, subject.clone(), payload, timeout, trace, hop).await?;
    decode_reply(&subject, &reply)
}

/// A request body as JSON bytes (`bad_request` when it cannot be encoded).
pub fn encode_request<Req: Serialize>(body: &Req) -> Result<Vec<u8>, ControlError> {
    serde_json::to_vec(body).map_err(|e| {
        ControlError::new(ErrorCode::BadRequest, format!("cannot encode request: {e}"))
    })
}

/// Sends an encoded request to `subject` and returns the reply's bytes, unread: the transport
/// half of [`request_with`]. No reply within `timeout`, or nobody serving `subject`, is
/// `unavailable`.
pub async fn request_bytes(
    client: &async_nats::Client,
    subject: String,
    payload: Vec<u8>,
    timeout: Duration,
    trace: Option<TraceContext>,
    hop: Hop,
) -> Result<Vec<u8>, ControlError> {
    // The client's own request timeout (10 s by default) must not cut a longer deadline short:
    // the request carries `timeout` itself, and the outer timeout is the same deadline.
    let mut request = async_nats::client::Request::new()
        .payload(payload.into())
        .timeout(Some(timeout));
    let forwarded = hop.is_forwarded();
    if trace.is_some() || forwarded {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(ctx) = trace {
            ctx.inject(&mut headers);
        }
        if forwarded {
            headers.insert(FORWARDED_HEADER, "1");
        }
        request = request.headers(headers);
    }
    let send = client.send_request(subject.clone(), request);
    let reply = tokio::time::timeout(timeout + Duration::from_millis(250), send)
        .await
        .map_err(|_| no_reply(&subject, timeout))?
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
    Ok(reply.payload.to_vec())
}

/// How a watched request ([`request_watched`]) asks for and waits on heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    /// The heartbeat interval asked of the serving node ([`HEARTBEAT_HEADER`]).
    pub every: Duration,
    /// How long without a heartbeat or the reply means the serving node is not running.
    pub silence: Duration,
    /// How long the first sign (a heartbeat or the reply) may take: a running node sends its
    /// first heartbeat as soon as it takes the request, so a node that stays silent this long
    /// is given up sooner than after [`Watch::silence`] (at most `silence`). A stopped node
    /// still holding its queue subscription is picked at random among the members; short
    /// first waits let a call try several times within its deadline (G3: with one of three
    /// stopped, five 2 s attempts all went to it about once in 250 calls).
    pub first: Duration,
}

impl Default for Watch {
    /// Heartbeats every 250 ms; the first sign within 750 ms, then 2 s of silence (eight
    /// missed heartbeats) gives up.
    fn default() -> Self {
        Watch {
            every: Duration::from_millis(250),
            silence: Duration::from_secs(2),
            first: Duration::from_millis(750),
        }
    }
}

/// Why a watched request got no reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Unanswered {
    /// Neither a heartbeat nor the reply came for [`Watch::silence`]: the node it reached is
    /// not running (stopped, hung, cut off). The request may or may not have been applied;
    /// another node may be asked, with the same request id.
    Silent(ControlError),
    /// Any other failure (the deadline passed while the node worked, nobody serves the subject,
    /// the connection failed): final.
    Failed(ControlError),
}

impl Unanswered {
    /// The error to report when no retry follows.
    pub fn into_error(self) -> ControlError {
        match self {
            Unanswered::Silent(e) | Unanswered::Failed(e) => e,
        }
    }
}

/// Sends an encoded request with [`HEARTBEAT_HEADER`] and waits up to `timeout` for its reply,
/// reading the serving node's heartbeats meanwhile: [`Unanswered::Silent`] when they stop for
/// `watch.silence`. The reply's bytes, unread, as [`request_bytes`] returns them.
pub async fn request_watched(
    client: &async_nats::Client,
    subject: String,
    payload: Vec<u8>,
    timeout: Duration,
    watch: Watch,
    trace: Option<TraceContext>,
    hop: Hop,
) -> Result<Vec<u8>, Unanswered> {
    let failed = |why: String| {
        Unanswered::Failed(ControlError::new(
            ErrorCode::Unavailable,
            format!("request on {subject} failed: {why}"),
        ))
    };
    let inbox = client.new_inbox();
    // One connection keeps order: the subscription is on the server before the request.
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| failed(e.to_string()))?;
    let mut headers = async_nats::HeaderMap::new();
    if let Some(ctx) = trace {
        ctx.inject(&mut headers);
    }
    if hop.is_forwarded() {
        headers.insert(FORWARDED_HEADER, "1");
    }
    headers.insert(
        HEARTBEAT_HEADER,
        watch.every.as_millis().to_string().as_str(),
    );
    client
        .publish_with_reply_and_headers(subject.clone(), inbox, headers, payload.into())
        .await
        .map_err(|e| failed(e.to_string()))?;
    let end = tokio::time::Instant::now() + timeout;
    let mut heard = false;
    loop {
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(Unanswered::Failed(no_reply(&subject, timeout)));
        }
        let window = if heard {
            watch.silence
        } else {
            watch.first.min(watch.silence)
        };
        let wait = window.min(left);
        match tokio::time::timeout(wait, replies.next()).await {
            Err(_) if wait < window => return Err(Unanswered::Failed(no_reply(&subject, timeout))),
            Err(_) => {
                return Err(Unanswered::Silent(ControlError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "the node serving {subject} stopped answering (no heartbeat for {} ms); is it running?",
                        window.as_millis()
                    ),
                )))
            }
            Ok(None) => return Err(failed("the reply subscription closed".to_owned())),
            Ok(Some(msg)) => {
                if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
                    return Err(Unanswered::Failed(no_responders(&subject)));
                }
                let heartbeat = msg
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(STATUS_HEADER))
                    .is_some_and(|v| v.as_str() == STATUS_WORKING);
                if !heartbeat {
                    return Ok(msg.payload.to_vec());
                }
                heard = true;
            }
        }
    }
}

/// The `unavailable` error of a request to `subject` that got no reply within `timeout`.
pub fn no_reply(subject: &str, timeout: Duration) -> ControlError {
    ControlError::new(
        ErrorCode::Unavailable,
        format!(
            "no reply on {subject} within {} ms; is a lineage node running for this cluster?",
            timeout.as_millis()
        ),
    )
}

/// The `unavailable` error of a request to `subject` that nobody serves.
pub fn no_responders(subject: &str) -> ControlError {
    ControlError::new(
        ErrorCode::Unavailable,
        format!("nobody serves {subject}; is a lineage node running for this cluster?"),
    )
}

/// Decodes a reply envelope received on `subject`: its result, or the error it carries; a
/// reply that is not an envelope is `internal`.
pub fn decode_reply<Res: DeserializeOwned>(
    subject: &str,
    reply: &[u8],
) -> Result<Res, ControlError> {
    let envelope: Reply<Res> = serde_json::from_slice(reply).map_err(|e| {
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
            BusError::Protocol(_)
            | BusError::Config(_)
            | BusError::Json { .. }
            | BusError::Core(_) => ErrorCode::BadRequest,
            BusError::LogConflict { .. } | BusError::StreamReplicas { .. } => ErrorCode::Refused,
        };
        ControlError::new(code, e.to_string())
    }
}
