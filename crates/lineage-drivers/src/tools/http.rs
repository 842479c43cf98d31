//! The tools over streamable HTTP (T1, T5): for an agent that declares `mcpCapabilities.http`,
//! the node serves every granted session's [`DelegationTools`] on one loopback listener, the
//! official SDK's streamable HTTP server (`rmcp`'s [`StreamableHttpService`]) behind a bearer
//! check.
//!
//! A request must carry `Authorization: Bearer <secret>`, the secret of a live grant
//! ([`super::socket::ToolsGrant`]); it is then served by that session's own MCP service, so a
//! call acts as that session only. Anything else is answered `401` with one line
//! ([`REFUSED_HTTP`]) and reaches no service: another agent on the node that does not know the
//! secret cannot act as this session. The listener binds loopback only (the secret travels in
//! clear text), and rmcp's `Host` check refuses other host names (DNS rebinding).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use lineage_core::ids::SessionId;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use super::socket::Grants;
use super::{DelegationTools, TurnSlot};
use crate::error::DriverError;

/// The path of the MCP endpoint on the listener.
pub const MCP_PATH: &str = "/mcp";

/// The body of a refused request (`401`).
pub const REFUSED_HTTP: &str = "lineage tools: refused: send Authorization: Bearer <secret> with the secret of a hosted session (the mcpServers entry of its session/new has it); this one names none";

/// One session's MCP service over HTTP (its MCP sessions live in it).
pub(super) type SessionService = StreamableHttpService<DelegationTools, LocalSessionManager>;

/// The MCP service of `session`, acting through whatever turn `slot` holds.
///
/// Stateless, with plain JSON answers (`legacy_session_mode: false`, `json_response: true`)
/// and no SSE priming event (`sse_retry: None`): in its default mode rmcp opens every stream
/// with an empty `data:` event (`id: 0`, `retry: 3000`) and lets clients resume streams by
/// event id, and Gemini CLI 0.61 then shows its model none of the tools (issue 32, item 2:
/// its `tools/list` answer never arrives whole). Every call here is one request and one
/// answer (a long `wait_for_children` included), the session is the grant's, not an MCP
/// session's, so nothing needs a stream or its resumption.
pub(super) fn session_service(session: SessionId, slot: TurnSlot) -> SessionService {
    let mut config = StreamableHttpServerConfig::default().with_sse_retry(None);
    config.legacy_session_mode = false;
    config.json_response = true;
    StreamableHttpService::new(
        move || Ok(DelegationTools::new(session.clone(), slot.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Binds `listen` (loopback only) and serves the grants; the MCP endpoint's URL and the task.
pub(super) fn serve(
    listen: SocketAddr,
    grants: Grants,
) -> Result<(String, tokio::task::JoinHandle<()>), DriverError> {
    if !listen.ip().is_loopback() {
        return Err(DriverError::ToolsSocket(format!(
            "the tools' HTTP address {listen} is not a loopback address; the secrets travel in clear text, so use 127.0.0.1:PORT (0 picks a port)"
        )));
    }
    let fail = |e: std::io::Error| {
        DriverError::ToolsSocket(format!(
            "cannot listen for the tools over HTTP on {listen}: {e}; pick a free port or 0"
        ))
    };
    let std_listener = std::net::TcpListener::bind(listen).map_err(fail)?;
    std_listener.set_nonblocking(true).map_err(fail)?;
    let bound = std_listener.local_addr().map_err(fail)?;
    let listener = tokio::net::TcpListener::from_std(std_listener).map_err(fail)?;
    let url = format!("http://{bound}{MCP_PATH}");
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            // Small JSON-RPC messages, one at a time: no Nagle delay.
            let _ = stream.set_nodelay(true);
            let grants = grants.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let grants = grants.clone();
                    async move { Ok::<_, Infallible>(route(request, &grants).await) }
                });
                let served = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                if let Err(e) = served {
                    tracing::debug!(error = %e, "a tools HTTP connection ended");
                }
            });
        }
    });
    Ok((url, task))
}

/// A request to the session its bearer secret names, or `401` / `404` in one line.
async fn route(
    request: Request<Incoming>,
    grants: &Grants,
) -> Response<BoxBody<Bytes, Infallible>> {
    if request.uri().path() != MCP_PATH {
        return plain(
            StatusCode::NOT_FOUND,
            format!("lineage tools: no such path; the MCP endpoint is {MCP_PATH}"),
        );
    }
    let secret = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let service = secret.and_then(|secret| {
        grants
            .lock()
            .ok()
            .and_then(|g| g.get(secret).and_then(|granted| granted.http.clone()))
    });
    match service {
        Some(service) => service.handle(request).await,
        None => {
            let mut refused = plain(StatusCode::UNAUTHORIZED, REFUSED_HTTP.to_owned());
            refused.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            refused
        }
    }
}

fn plain(status: StatusCode, line: String) -> Response<BoxBody<Bytes, Infallible>> {
    let mut response = Response::new(Full::new(Bytes::from(line + "\n")).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
