//! The node's HTTP endpoints (O2), on axum: `/metrics` (OpenMetrics text, [`crate::metrics`]),
//! `/healthz` (the process is up), `/readyz` (NATS connected and the registry reachable; 503
//! with the reason in one line otherwise). Any other path is a 404 naming the three. The route
//! table is [`router`], pinned by this module's test.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::NodeError;

/// What the HTTP endpoints ask the node.
pub trait Probe: Send + Sync + 'static {
    /// The node's metrics, OpenMetrics text ([`crate::metrics::MetricsPage::render`]).
    fn metrics(&self) -> Pin<Box<dyn Future<Output = String> + Send + '_>>;
    /// `Ok(())` when ready; otherwise the reason, one line.
    fn ready(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

/// The routes, over `probe`.
pub fn router(probe: Arc<dyn Probe>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .fallback(|| async { (StatusCode::NOT_FOUND, "try /metrics, /healthz or /readyz\n") })
        .with_state(probe)
}

async fn metrics(State(probe): State<Arc<dyn Probe>>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        probe.metrics().await,
    )
        .into_response()
}

async fn ready(State(probe): State<Arc<dyn Probe>>) -> Response {
    match probe.ready().await {
        Ok(()) => "ready\n".into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

/// Binds `addr` and serves [`router`] until `shutdown` fires. Returns the bound address.
pub async fn serve(
    addr: &str,
    probe: Arc<dyn Probe>,
    shutdown: CancellationToken,
) -> Result<std::net::SocketAddr, NodeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| NodeError::Io {
            what: format!("cannot bind the HTTP address {addr} (node.http_addr); pick a free port"),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| NodeError::Io {
        what: "cannot read the HTTP address".into(),
        source,
    })?;
    let app = router(probe);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the HTTP endpoints stopped");
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed {
        ready: Result<(), String>,
    }

    impl Probe for Fixed {
        fn metrics(&self) -> Pin<Box<dyn Future<Output = String> + Send + '_>> {
            Box::pin(async { "# EOF\n".to_owned() })
        }
        fn ready(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
            Box::pin(async { self.ready.clone() })
        }
    }

    async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String, String) {
        let response = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (status, kind, response.text().await.unwrap())
    }

    #[tokio::test]
    async fn o2_the_routes_are_metrics_healthz_and_readyz() {
        let shutdown = CancellationToken::new();
        for (ready, readyz) in [
            (Ok(()), (200, "ready\n".to_owned())),
            (
                Err("NATS is not connected".to_owned()),
                (503, "NATS is not connected\n".to_owned()),
            ),
        ] {
            let probe = Arc::new(Fixed { ready });
            let addr = serve("127.0.0.1:0", probe, shutdown.clone()).await.unwrap();
            let (status, kind, body) = get(addr, "/metrics").await;
            assert_eq!((status, body.as_str()), (200, "# EOF\n"));
            assert_eq!(kind, crate::metrics::CONTENT_TYPE);
            assert_eq!(get(addr, "/healthz").await.0, 200);
            let (status, _, body) = get(addr, "/readyz").await;
            assert_eq!((status, body), readyz);
            let (status, _, body) = get(addr, "/nothing").await;
            assert_eq!(status, 404);
            assert!(body.contains("/metrics, /healthz or /readyz"), "{body}");
        }
        shutdown.cancel();
    }
}
