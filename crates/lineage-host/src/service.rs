//! The `lineage` control service (N3, O3), served on the host's control transport
//! ([`lineage_bus::ports::ControlTransport`]); on NATS it is the `lineage` micro service, and
//! `nats micro ls` shows one instance per node.
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
//! (`Shared::forward`, in `routing.rs`), and a request carrying it is served where it lands, never forwarded
//! again ([`Hop`]). A body from an older client or node that still carries the retired
//! `"forwarded"` field is accepted: the field is dropped, and `true` counts as the header
//! (`lineage_protocol::envelope::decode_routed_request`).

use lineage_bus::control::{decode_request, decode_routed_request, encode_reply, ControlError};
use lineage_bus::ports::{ControlEndpoints, IncomingCall};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::control::{
    ops, AgentsRequest, DrainRequest, FollowupRequest, Hop, InterruptRequest, ResumeRequest,
    SpawnRequest, StartRequest, StatusRequest, StopRequest,
};
use crate::error::HostError;
use crate::host::Host;

/// The running service. It runs until the host's shutdown token is cancelled or
/// [`ServiceHandle::stop`] is called; dropping the handle does not stop it.
pub struct ServiceHandle {
    stop: tokio_util::sync::CancellationToken,
    keeper: JoinHandle<()>,
    /// Asks the serving task to leave the cluster-wide queue group; answered when it has.
    leave: tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<()>>,
}

impl std::fmt::Debug for ServiceHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceHandle")
            .field("stopped", &self.stop.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl ServiceHandle {
    /// Graceful shutdown (K1, [`crate::handoff`]): stops serving the cluster-wide subjects
    /// (requests to any node go to the others from now on) and keeps serving this node's own
    /// (forwarded followups and interrupts for the sessions it still hosts, drain fan-out).
    /// Returns once the queue subscriptions are gone from the server.
    pub async fn leave_group(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.leave.send(tx).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Stops every endpoint and unregisters the service.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.keeper.await;
    }
}

/// Serves `host`'s control endpoints on its control transport (on NATS: registers the
/// `lineage` micro service, [`lineage_bus::transport::NatsControl`]) until the host shuts down.
pub async fn serve(host: Host) -> Result<ServiceHandle, HostError> {
    let node = host.node().clone();
    let control = host.shared.bus.control.clone();
    let endpoints = control.serve(&node).await.map_err(|e| {
        HostError::Unavailable(format!("cannot serve the lineage control service: {e}"))
    })?;
    let stop = host.shutdown_token().child_token();
    let (leave, leaving) = tokio::sync::mpsc::channel(1);
    let keeper = run_endpoints(host.clone(), endpoints, stop.clone(), leaving);
    // Make sure the endpoints answer before anyone is told we serve: a request to our own
    // status endpoint goes the way any other node's would.
    let probe: Result<crate::control::StatusReply, HostError> = host
        .shared
        .node_request(
            &node,
            ops::STATUS,
            &StatusRequest {},
            std::time::Duration::from_secs(5),
        )
        .await;
    if let Err(e) = probe {
        stop.cancel();
        let _ = keeper.await;
        return Err(HostError::Unavailable(format!(
            "the lineage service does not answer its own status request: {e}"
        )));
    }
    Ok(ServiceHandle {
        stop,
        keeper,
        leave,
    })
}

/// Reads the endpoints until `stop` is cancelled (the host's shutdown cancels it too), each
/// call in its own task, then stops serving.
fn run_endpoints(
    host: Host,
    mut endpoints: Box<dyn ControlEndpoints>,
    stop: tokio_util::sync::CancellationToken,
    mut leave: tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<()>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let incoming = tokio::select! {
                r = endpoints.next() => r,
                Some(done) = leave.recv() => {
                    endpoints.leave_group().await;
                    let _ = done.send(());
                    continue;
                }
                _ = stop.cancelled() => break,
            };
            let Some(IncomingCall { call, respond }) = incoming else {
                break;
            };
            let host = host.clone();
            tokio::spawn(async move {
                // The caller's trace context: the operation's span continues its trace.
                let body = lineage_bus::trace::maybe_scope(
                    call.trace,
                    Box::pin(handle_via(&host, &call.op, &call.body, call.hop)),
                )
                .await;
                if let Err(e) = respond(body).await {
                    tracing::warn!(op = %call.op, error = %e, "cannot send a control reply");
                }
            });
        }
        endpoints.stop().await;
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
