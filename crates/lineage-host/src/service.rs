//! The `lineage` NATS micro service (N3, O3): `nats micro ls` shows one instance per node.
//!
//! Endpoints, bodies in [`crate::control`], replies in the `lineage_bus::control` envelope:
//!
//! - `lineage.<cluster>.ctl.<op>` for `spawn`, `followup`, `interrupt`, `drain`, `resume`,
//!   `status`: queue-grouped (`lineage-<cluster>`), so any one node serves each request;
//! - `lineage.<cluster>.node.<node>.<op>`: the same ops plus `start`, `stop`, `release`, served
//!   by that node only (placement on a specific node, forwarding, drain fan-out).
//!
//! Malformed JSON or bad input gets `{"v":1,"error":{"code":"bad_request",...}}` and changes
//! nothing; no handler panics on input. Each request runs in its own task, so a long one-shot
//! run does not hold up other requests. A valid `traceparent` header on a request becomes the
//! parent of the operation's span ([`crate::telemetry`]); an invalid one is ignored.
//!
//! Routing is a header, not a body field: a node that forwards a `spawn`, `followup` or
//! `interrupt` to the node hosting the session sets `Lineage-Forwarded: 1`
//! ([`Shared::forward`]), and a request carrying it is served where it lands, never forwarded
//! again ([`Hop`]). A body from an older client or node that still carries the retired
//! `"forwarded"` field is accepted: the field is dropped, and `true` counts as the header
//! (`lineage_protocol::envelope::decode_routed_request`).

use futures::StreamExt;
use lineage_bus::control::{
    decode_request, decode_routed_request, encode_reply, ControlError, FORWARDED_HEADER,
    SERVICE_NAME,
};
use lineage_bus::trace::TraceContext;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::control::{
    ops, AgentsRequest, DrainRequest, FollowupRequest, Hop, InterruptRequest, ResumeRequest,
    SpawnRequest, StartRequest, StatusRequest, StopRequest,
};
use crate::error::HostError;
use crate::host::{Host, Shared};

/// The running service. It runs until the host's shutdown token is cancelled or
/// [`ServiceHandle::stop`] is called; dropping the handle does not stop it.
pub struct ServiceHandle {
    stop: tokio_util::sync::CancellationToken,
    keeper: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ServiceHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceHandle")
            .field("endpoints", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl ServiceHandle {
    /// Stops every endpoint and unregisters the service.
    pub async fn stop(self) {
        self.stop.cancel();
        for task in &self.tasks {
            task.abort();
        }
        let _ = self.keeper.await;
    }
}

/// Registers the `lineage` service for `host` and serves it until the host shuts down.
pub async fn serve(host: Host) -> Result<ServiceHandle, HostError> {
    use async_nats::service::ServiceExt;
    let subjects = host.subjects().clone();
    let cluster = subjects.cluster().to_owned();
    let node = host.node().clone();
    let nats = host.nats().cloned().ok_or_else(|| {
        HostError::Unavailable(format!(
            "node {node} has no NATS connection (in-memory ports): there is no lineage service to serve"
        ))
    })?;
    let service = nats
        .service_builder()
        .description(format!("lineage control, cluster {cluster}, node {node}"))
        .metadata(
            [
                ("cluster".to_owned(), cluster.clone()),
                ("node".to_owned(), node.to_string()),
            ]
            .into_iter()
            .collect(),
        )
        .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| HostError::Unavailable(format!("cannot start the lineage service: {e}")))?;
    let mut tasks = Vec::new();
    let queue = format!("lineage-{cluster}");
    for op in ops::CLUSTER {
        let endpoint = service
            .endpoint_builder()
            .name(format!("ctl-{op}"))
            .queue_group(&queue)
            .add(subjects.control(op))
            .await
            .map_err(|e| HostError::Unavailable(format!("cannot add endpoint {op}: {e}")))?;
        tasks.push(run_endpoint(host.clone(), op, endpoint));
    }
    for op in ops::NODE {
        let endpoint = service
            .endpoint_builder()
            .name(format!("node-{op}"))
            .queue_group(format!("lineage-{cluster}-{node}"))
            .add(subjects.node_control(&node, op))
            .await
            .map_err(|e| HostError::Unavailable(format!("cannot add endpoint {op}: {e}")))?;
        tasks.push(run_endpoint(host.clone(), op, endpoint));
    }
    // Make sure the server has every subscription before anyone is told we serve: a request
    // to our own status endpoint goes through the server after our subscriptions.
    let probe: Result<crate::control::StatusReply, ControlError> = lineage_bus::control::request(
        &nats,
        subjects.node_control(&node, ops::STATUS),
        &StatusRequest {},
        std::time::Duration::from_secs(5),
    )
    .await;
    if let Err(e) = probe {
        return Err(HostError::Unavailable(format!(
            "the lineage service does not answer its own status request: {e}"
        )));
    }
    // The service lives until shutdown (dropping it would close every endpoint).
    let stop = host.shutdown_token().child_token();
    let until = stop.clone();
    let keeper = tokio::spawn(async move {
        until.cancelled().await;
        let _ = service.stop().await;
    });
    Ok(ServiceHandle {
        stop,
        keeper,
        tasks,
    })
}

fn run_endpoint(
    host: Host,
    op: &'static str,
    mut endpoint: async_nats::service::endpoint::Endpoint,
) -> JoinHandle<()> {
    let shutdown = host.shutdown_token();
    tokio::spawn(async move {
        loop {
            let request = tokio::select! {
                r = endpoint.next() => r,
                _ = shutdown.cancelled() => break,
            };
            let Some(request) = request else { break };
            let host = host.clone();
            tokio::spawn(async move {
                // The caller's trace context: the operation's span continues its trace.
                let headers = request.message.headers.as_ref();
                let remote = TraceContext::from_headers(headers);
                let hop = Hop::from_header(
                    headers
                        .and_then(|h| h.get(FORWARDED_HEADER))
                        .map(|v| v.as_str()),
                );
                let body = lineage_bus::trace::maybe_scope(
                    remote,
                    Box::pin(handle_via(&host, op, &request.message.payload, hop)),
                )
                .await;
                if let Err(e) = request.respond(Ok(body.into())).await {
                    tracing::warn!(op, error = %e, "cannot send a control reply");
                }
            });
        }
    })
}

fn parse<T: DeserializeOwned>(op: &str, body: &[u8]) -> Result<T, ControlError> {
    decode_request(op, body)
}

fn reply<T: Serialize>(outcome: Result<T, HostError>) -> Vec<u8> {
    encode_reply(&outcome.map_err(|e| e.to_control()))
}

/// Handles one request body for `op` from a client and returns the reply body (always an
/// envelope).
pub async fn handle(host: &Host, op: &str, body: &[u8]) -> Vec<u8> {
    handle_via(host, op, body, Hop::Client).await
}

/// [`handle`] of a request that reached this node by `hop` (the `Lineage-Forwarded` header).
pub async fn handle_via(host: &Host, op: &str, body: &[u8], hop: Hop) -> Vec<u8> {
    macro_rules! routed {
        ($ty:ty, |$req:ident, $hop:ident| $call:expr) => {
            match decode_routed_request::<$ty>(op, body, hop) {
                Ok(($req, $hop)) => reply(Box::pin($call).await),
                Err(e) => encode_reply::<()>(&Err(e)),
            }
        };
    }
    macro_rules! run {
        ($ty:ty, |$req:ident| $call:expr) => {
            match parse::<$ty>(op, body) {
                // Boxed: the op futures are large, and this match holds one of each.
                Ok($req) => reply(Box::pin($call).await),
                Err(e) => encode_reply::<()>(&Err(e)),
            }
        };
    }
    match op {
        ops::SPAWN => routed!(SpawnRequest, |r, h| host.spawn_via(r, h)),
        ops::FOLLOWUP => routed!(FollowupRequest, |r, h| host.followup_via(r, h)),
        ops::INTERRUPT => routed!(InterruptRequest, |r, h| host.interrupt_via(r, h)),
        ops::DRAIN => run!(DrainRequest, |r| host.drain_with_progress(r.roots, r.progress)),
        ops::RESUME => run!(ResumeRequest, |r| host.resume(r.session)),
        ops::STATUS => run!(StatusRequest, |_r| async { Ok::<_, HostError>(host.status()) }),
        ops::AGENTS => run!(AgentsRequest, |_r| async { Ok::<_, HostError>(host.agents()) }),
        ops::START => run!(StartRequest, |r| host.start_hosted(r)),
        ops::STOP => run!(StopRequest, |r| async {
            Ok::<_, HostError>(host.stop_sessions(r).await)
        }),
        ops::RELEASE => run!(StopRequest, |r| async {
            Ok::<_, HostError>(host.release_sessions(r).await)
        }),
        other => encode_reply::<()>(&Err(ControlError::new(
            lineage_bus::control::ErrorCode::BadRequest,
            format!("unknown op {other:?}; use one of spawn, followup, interrupt, drain, resume, status"),
        ))),
    }
}

impl Shared {
    /// Forwards a request to `node`, the node hosting its session, with `Lineage-Forwarded: 1`
    /// (and the current trace context): that node serves it and never forwards it again.
    pub(crate) async fn forward<Req: Serialize, Res: DeserializeOwned>(
        &self,
        node: &lineage_core::ids::NodeId,
        op: &str,
        body: &Req,
        timeout: std::time::Duration,
    ) -> Result<Res, HostError> {
        let nats = self.control_transport(node)?;
        let subject = self.cfg.subjects.node_control(node, op);
        lineage_bus::control::request_with(
            nats,
            subject,
            body,
            timeout,
            lineage_bus::trace::current(),
            Hop::Forwarded,
        )
        .await
        .map_err(|e: ControlError| match e.code {
            lineage_bus::control::ErrorCode::Unavailable => HostError::Unavailable(e.message),
            _ => HostError::Remote(e),
        })
    }
}
