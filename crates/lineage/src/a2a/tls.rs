//! HTTPS and mutual TLS for the gateway (A1): `--tls-cert` and `--tls-key` serve the agents
//! over HTTPS; `--client-ca` also asks every client for a certificate signed by that CA, and
//! a connection without one ends in the handshake, before any request (the cards then declare
//! the `mtls` scheme). rustls with the ring provider (the one the NATS client already uses
//! here: no second TLS stack), handshakes run beside the accept loop so a slow or failing one
//! holds up nobody, and a failed one is a debug line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lineage_bus::control::ControlError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::output::usage;

/// How long a client has to finish its handshake.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

/// The files of `--tls-cert`, `--tls-key` and `--client-ca`.
#[derive(Debug, Clone)]
pub(crate) struct TlsFiles {
    /// The server's certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA client certificates must be signed by (PEM): mutual TLS.
    pub client_ca: Option<PathBuf>,
}

fn certs(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, ControlError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| usage(format!("{flag} {}: {e}", path.display())))?;
    match certs.is_empty() {
        true => Err(usage(format!(
            "{flag} {}: no PEM certificate in it",
            path.display()
        ))),
        false => Ok(certs),
    }
}

/// The server's TLS configuration; one line naming the flag and file that is wrong.
pub(crate) fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, ControlError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs(&files.cert, "--tls-cert")?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| usage(format!("--tls-key {}: {e}", files.key.display())))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| usage(format!("TLS: {e}")))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certs(ca, "--client-ca")? {
                roots
                    .add(cert)
                    .map_err(|e| usage(format!("--client-ca {}: {e}", ca.display())))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| usage(format!("--client-ca {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        usage(format!(
            "--tls-cert {} and --tls-key {} do not go together: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A listener whose connections are TLS streams, their handshakes done (axum serves it).
pub(crate) struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` and shakes hands with `config`, each connection on its own task.
    pub(crate) fn new(
        tcp: TcpListener,
        config: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "a2a: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, ready) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_WITHIN, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = ready.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "a2a: TLS handshake refused")
                        }
                        Err(_) => tracing::debug!(%peer, "a2a: TLS handshake too slow"),
                    }
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended (it never does while the listener lives): wait for ever,
            // as a listener with no more connections does.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
