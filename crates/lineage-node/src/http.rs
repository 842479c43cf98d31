//! The node's HTTP endpoints (O2): `/metrics` (Prometheus text), `/healthz` (the process is
//! up), `/readyz` (NATS connected and the registry reachable).
//!
//! A deliberately small HTTP/1.1 responder on tokio: three GET routes do not justify a web
//! framework in the dependency tree.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::NodeError;

/// What the HTTP endpoints ask the node.
pub trait Probe: Send + Sync + 'static {
    /// Prometheus text exposition of the node's metrics.
    fn metrics(&self) -> Pin<Box<dyn Future<Output = String> + Send + '_>>;
    /// `Ok(())` when ready; otherwise the reason, one line.
    fn ready(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

/// Binds `addr` and serves until `shutdown` fires. Returns the bound address.
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
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = listener.accept() => a,
            };
            let Ok((mut stream, _)) = accepted else {
                continue;
            };
            let probe = probe.clone();
            tokio::spawn(async move {
                // Read the whole request head (it may come in several segments): answering
                // before it is read and closing would reset the connection.
                let mut buf = Vec::with_capacity(512);
                let mut chunk = [0u8; 1024];
                let read_head = async {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                };
                if tokio::time::timeout(std::time::Duration::from_secs(5), read_head)
                    .await
                    .is_err()
                    || buf.is_empty()
                {
                    return;
                }
                let head = String::from_utf8_lossy(&buf);
                let path = head
                    .lines()
                    .next()
                    .and_then(|l| l.split_whitespace().nth(1))
                    .unwrap_or("/");
                let (status, content_type, body) = match path {
                    "/metrics" => ("200 OK", "text/plain; version=0.0.4", probe.metrics().await),
                    "/healthz" => ("200 OK", "text/plain", "ok\n".to_owned()),
                    "/readyz" => match probe.ready().await {
                        Ok(()) => ("200 OK", "text/plain", "ready\n".to_owned()),
                        Err(why) => ("503 Service Unavailable", "text/plain", format!("{why}\n")),
                    },
                    _ => (
                        "404 Not Found",
                        "text/plain",
                        "try /metrics, /healthz or /readyz\n".to_owned(),
                    ),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(local)
}
