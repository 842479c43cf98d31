//! The SDK's tracer provider over an OTLP exporter, the exporter's TLS, and the counters the
//! node's `/metrics` shows.
//!
//! Spans go through the SDK's batch processor (its own thread; `OTEL_BSP_*`), which calls the
//! exporter: http/protobuf on a ureq client made here, gRPC on tonic (made inside
//! the caller's tokio runtime, which it then uses). The traced code never waits on export.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, Tracer};
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::registry::LookupSpan;

use super::{OtlpSettings, Protocol, TlsFiles, SCHEMA_URL};

/// Export counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OtlpStats {
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans in exports that failed (after the exporter's own retries).
    pub failed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    exported: AtomicU64,
    failed: AtomicU64,
}

impl Counters {
    fn get(&self) -> OtlpStats {
        OtlpStats {
            exported: self.exported.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

static GLOBAL: OnceLock<Arc<Counters>> = OnceLock::new();

/// The counters of the process's exporter, once one was registered with
/// [`OtlpHandle::register_global`].
pub fn global_stats() -> Option<OtlpStats> {
    GLOBAL.get().map(|c| c.get())
}

/// An exporter that counts what its inner exporter sent and failed to send.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    counters: Arc<Counters>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let outcome = self.inner.export(batch).await;
        let counter = match outcome {
            Ok(()) => &self.counters.exported,
            Err(_) => &self.counters.failed,
        };
        counter.fetch_add(n, Ordering::Relaxed);
        outcome
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The running export: its tracer provider and counters.
#[derive(Debug)]
pub struct OtlpHandle {
    provider: SdkTracerProvider,
    counters: Arc<Counters>,
}

impl OtlpHandle {
    /// The `tracing` layer that turns spans into this provider's spans (scope `lineage`, with
    /// the semantic conventions' schema URL).
    pub fn layer<S>(&self) -> OpenTelemetryLayer<S, Tracer>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let scope = InstrumentationScope::builder("lineage")
            .with_version(env!("CARGO_PKG_VERSION"))
            .with_schema_url(SCHEMA_URL)
            .build();
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer_with_scope(scope))
    }

    /// Export counters so far.
    pub fn stats(&self) -> OtlpStats {
        self.counters.get()
    }

    /// Makes these counters the ones [`global_stats`] reports (the first call wins).
    pub fn register_global(&self) {
        let _ = GLOBAL.set(self.counters.clone());
    }

    /// Sends what is queued and stops, waiting at most `limit`.
    pub async fn shutdown(self, limit: Duration) {
        let provider = self.provider;
        let _ = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(limit)).await;
    }
}

fn read(what: &str, path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| {
        format!(
            "cannot read {what} {}: {e}; fix the path or unset the variable (trace export is off)",
            path.display()
        )
    })
}

/// The HTTP client of an http/protobuf export: a ureq agent (blocking; the SDK's batch thread
/// calls it), with the export's deadline and the TLS files.
#[derive(Debug)]
struct UreqClient(ureq::Agent);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for UreqClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let mut response = self
            .0
            .run(http::Request::from_parts(parts, body.to_vec()))?;
        // A collector answers with a small status message; more is not read.
        let body = response
            .body_mut()
            .with_config()
            .limit(4 * 1024 * 1024)
            .read_to_vec()?;
        Ok(response.map(|_| bytes::Bytes::from(body)))
    }
}

/// The PEM items of `path`, named `what` in errors.
fn pem_items(
    what: &str,
    path: &std::path::Path,
) -> Result<Vec<ureq::tls::PemItem<'static>>, String> {
    let pem = read(what, path)?;
    ureq::tls::parse_pem(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "{what} {} is not PEM: {e} (trace export is off)",
                path.display()
            )
        })
}

fn http_client(settings: &OtlpSettings) -> Result<UreqClient, String> {
    use ureq::tls::{Certificate, ClientCert, PemItem, RootCerts, TlsConfig};
    let TlsFiles { ca, client } = &settings.tls;
    let mut tls = TlsConfig::builder();
    if let Some(ca) = ca {
        let certs: Vec<Certificate<'static>> = pem_items("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)?
            .into_iter()
            .filter_map(|item| match item {
                PemItem::Certificate(c) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_CERTIFICATE {} holds no certificate (trace export is off)",
                ca.display()
            ));
        }
        tls = tls.root_certs(RootCerts::new_with_certs(&certs));
    }
    if let Some((cert, key)) = client {
        let chain: Vec<Certificate<'static>> =
            pem_items("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert)?
                .into_iter()
                .filter_map(|item| match item {
                    PemItem::Certificate(c) => Some(c),
                    _ => None,
                })
                .collect();
        let key = pem_items("OTEL_EXPORTER_OTLP_CLIENT_KEY", key)?
            .into_iter()
            .find_map(|item| match item {
                PemItem::PrivateKey(k) => Some(k),
                _ => None,
            });
        let (false, Some(key)) = (chain.is_empty(), key) else {
            return Err(
                "the OTLP client certificate and key files must hold a PEM certificate \
                        and a PEM private key (trace export is off)"
                    .to_owned(),
            );
        };
        tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(settings.timeout))
        .http_status_as_error(false)
        .tls_config(tls.build())
        .build()
        .new_agent();
    Ok(UreqClient(agent))
}

/// The gRPC channel's TLS, when the endpoint is `https://` or TLS files are given.
fn grpc_tls(settings: &OtlpSettings) -> Result<Option<tonic::transport::ClientTlsConfig>, String> {
    let TlsFiles { ca, client } = &settings.tls;
    if !settings.endpoint.starts_with("https://") && ca.is_none() && client.is_none() {
        return Ok(None);
    }
    let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
    if let Some(ca) = ca {
        let pem = read("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)?;
        tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
    }
    if let Some((cert, key)) = client {
        let cert = read("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert)?;
        let key = read("OTEL_EXPORTER_OTLP_CLIENT_KEY", key)?;
        tls = tls.identity(tonic::transport::Identity::from_pem(cert, key));
    }
    Ok(Some(tls))
}

/// Starts export as `settings` say. Call it inside a tokio runtime (gRPC uses it). Fails
/// with one line (to log; export stays off) on a setting that cannot work.
pub fn start(settings: &OtlpSettings) -> Result<OtlpHandle, String> {
    let built = match settings.protocol {
        Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_http_client(http_client(settings)?)
            .with_timeout(settings.timeout)
            .build(),
        Protocol::Grpc => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_timeout(settings.timeout);
            if let Some(tls) = grpc_tls(settings)? {
                builder = builder.with_tls_config(tls);
            }
            builder.build()
        }
    };
    let exporter = built.map_err(|e| {
        format!(
            "cannot export traces to {}: {e}; check OTEL_EXPORTER_OTLP_ENDPOINT (trace export is off)",
            settings.endpoint
        )
    })?;
    let counters = Arc::new(Counters::default());
    let mut resource = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if let Some(name) = settings.default_service_name {
        resource = resource.with_service_name(name);
    }
    if let Some(node) = &settings.node {
        resource = resource.with_attribute(KeyValue::new("lineage.node", node.clone()));
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Counted {
            inner: exporter,
            counters: counters.clone(),
        })
        .with_resource(resource.build())
        .build();
    Ok(OtlpHandle { provider, counters })
}
