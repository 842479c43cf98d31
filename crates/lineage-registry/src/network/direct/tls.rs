//! Mutual TLS on the direct links (`registry.direct.tls_ca`, `tls_cert`, `tls_key`), as etcd's
//! peer TLS: every voter has one certificate, signed by the group's CA, which it presents both
//! when it is dialed (server) and when it dials (client); each end accepts only a certificate
//! of that CA, and the dialer checks the listener's against the host name (or IP) it dialed.
//! The certificate therefore needs both `serverAuth` and `clientAuth` (or no extended key
//! usage) and the voter's name in its subject alternative names. The token handshake still
//! runs inside TLS: it binds the link to the cluster and the two members.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::error::RegistryError;

/// The TLS side of this member's links: how it accepts and how it dials.
#[derive(Clone)]
pub struct LinkTls {
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) connector: TlsConnector,
}

impl std::fmt::Debug for LinkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkTls(mutual)")
    }
}

fn bad(key: &str, path: &Path, what: impl std::fmt::Display) -> RegistryError {
    RegistryError::Config(format!("registry.direct.{key} {}: {what}", path.display()))
}

fn certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, RegistryError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad(key, path, e))?;
    if certs.is_empty() {
        return Err(bad(key, path, "no PEM certificate in it"));
    }
    Ok(certs)
}

impl LinkTls {
    /// The links' TLS from PEM files: the CA every voter's certificate is signed by, this
    /// voter's certificate chain and its key. Each failure is one line naming the key and file.
    pub fn from_pem(ca: &Path, cert: &Path, key: &Path) -> Result<Self, RegistryError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in certs("tls_ca", ca)? {
            roots.add(c).map_err(|e| bad("tls_ca", ca, e))?;
        }
        let roots = Arc::new(roots);
        let chain = certs("tls_cert", cert)?;
        let private = || PrivateKeyDer::from_pem_file(key).map_err(|e| bad("tls_key", key, e));
        let mismatch = |e: rustls::Error| {
            RegistryError::Config(format!(
                "registry.direct.tls_cert {} and tls_key {} do not go together: {e}",
                cert.display(),
                key.display()
            ))
        };
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.clone(),
            provider.clone(),
        )
        .build()
        .map_err(|e| bad("tls_ca", ca, e))?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| RegistryError::Config(format!("registry.direct TLS: {e}")))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), private()?)
            .map_err(mismatch)?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| RegistryError::Config(format!("registry.direct TLS: {e}")))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, private()?)
            .map_err(mismatch)?;
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }
}

/// The name the dialer checks the listener's certificate against: the host of `host:port`
/// (an IP address or a DNS name; `[v6]:port` too).
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(addr)
        .trim_start_matches('[')
        .trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{addr:?} has no host name or IP a certificate can name: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_checked_is_the_dialed_host() {
        assert_eq!(
            server_name("lineage-voter-1.lineage-voter-headless:7101").unwrap(),
            ServerName::try_from("lineage-voter-1.lineage-voter-headless").unwrap()
        );
        assert_eq!(
            server_name("127.0.0.1:7101").unwrap(),
            ServerName::try_from("127.0.0.1").unwrap()
        );
        assert_eq!(
            server_name("[::1]:7101").unwrap(),
            ServerName::try_from("::1").unwrap()
        );
        assert!(server_name("bad host:1").is_err());
    }

    #[test]
    fn missing_or_empty_files_name_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let e = LinkTls::from_pem(&empty, &empty, &empty)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("registry.direct.tls_ca") && e.contains("no PEM"),
            "{e}"
        );
        let missing = dir.path().join("missing.pem");
        let e = LinkTls::from_pem(&missing, &empty, &empty)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("registry.direct.tls_ca") && e.contains("missing.pem"),
            "{e}"
        );
    }
}
