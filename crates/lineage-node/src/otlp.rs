//! Trace export over OTLP (O2, U2), on the OpenTelemetry SDK: `opentelemetry-otlp` sends what
//! `tracing-opentelemetry` makes of the lineage crates' spans.
//!
//! # Configuration: the standard `OTEL_*` variables
//!
//! Export is on when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (http: `/v1/traces` appended) is set, unless
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Each `OTEL_EXPORTER_OTLP_*`
//! variable below has a `OTEL_EXPORTER_OTLP_TRACES_*` form that wins over it.
//!
//! | variable | what |
//! |---|---|
//! | `..._PROTOCOL` | `http/protobuf` (default) or `grpc` |
//! | `..._HEADERS` | `key=value,...` sent with every export (read by the exporter) |
//! | `..._TIMEOUT` | one export's deadline, in ms (default 10000) |
//! | `..._CERTIFICATE` | a PEM file of the CA that signed the collector's certificate (TLS) |
//! | `..._CLIENT_CERTIFICATE`, `..._CLIENT_KEY` | PEM files of this process's certificate and key (mutual TLS) |
//! | `..._INSECURE` | gRPC to an endpoint without a scheme: `true` for plain text (read by the exporter) |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource (`service.name` defaults to `lineage`) |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | sampling (default `parentbased_always_on`); a child follows its parent's decision across nodes |
//! | `OTEL_BSP_*` | the batch processor's queue, batch size and delays |
//!
//! `https://` endpoints use TLS (rustls; the system's roots plus `..._CERTIFICATE`). A setting
//! that cannot work (an unknown protocol or exporter, a certificate file that cannot be read,
//! half of a client key pair) is one line at start, and export stays off.
//!
//! # What is exported
//!
//! The spans of the lineage crates at `info` and above (the node's operation spans, see
//! `lineage_host::telemetry`, and the registry's request spans), each under its parent across
//! nodes: the `traceparent` that travels on the bus is the exported span's
//! (`lineage_bus::trace::open_span`). The resource carries `service.name`, `service.version`
//! and `lineage.node`; the instrumentation scope is `lineage` with the semantic conventions'
//! schema URL lineage follows ([`SCHEMA_URL`]).
//!
//! | file | what |
//! |---|---|
//! | `otlp.rs` | the settings, read from the environment (a function of it, tested) |
//! | `otlp/export.rs` | the SDK's tracer provider, the exporter with its TLS, the counters |

use std::path::PathBuf;
use std::time::Duration;

mod export;

pub use export::{global_stats, start, OtlpHandle, OtlpStats};

/// The semantic conventions lineage's spans follow (the instrumentation scope's schema URL).
pub const SCHEMA_URL: &str = opentelemetry_semantic_conventions::SCHEMA_URL;

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP over gRPC (tonic).
    Grpc,
    /// OTLP over HTTP with protobuf bodies (reqwest).
    HttpProtobuf,
}

/// The TLS files an export uses, when given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The collector's CA (PEM).
    pub ca: Option<PathBuf>,
    /// This process's certificate and key (PEM), for mutual TLS.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// What the environment asks of trace export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The protocol.
    pub protocol: Protocol,
    /// The endpoint, as the variable gave it (the exporter resolves it, `/v1/traces` included).
    pub endpoint: String,
    /// One export's deadline.
    pub timeout: Duration,
    /// TLS files.
    pub tls: TlsFiles,
    /// `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names it.
    pub default_service_name: Option<&'static str>,
    /// `lineage.node`, for a node.
    pub node: Option<String>,
}

impl OtlpSettings {
    /// The settings `var` (an environment lookup) asks for: `Ok(None)` when export is off,
    /// `Err` with one line when it asks for something that cannot work.
    pub fn from_env(
        var: impl Fn(&str) -> Option<String>,
        node: Option<&str>,
    ) -> Result<Option<Self>, String> {
        let get = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        // The traces form of a variable wins over the general one.
        let pick = |suffix: &str| {
            get(&format!("OTEL_EXPORTER_OTLP_TRACES_{suffix}"))
                .or_else(|| get(&format!("OTEL_EXPORTER_OTLP_{suffix}")))
        };
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match get("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                return Err(format!(
                    "OTEL_TRACES_EXPORTER={other} is not supported: lineage exports traces over \
                     OTLP only; set it to otlp or none (trace export is off)"
                ))
            }
        }
        let Some(endpoint) = pick("ENDPOINT") else {
            return Ok(None);
        };
        let protocol = match pick("PROTOCOL").as_deref() {
            None | Some("http/protobuf") => Protocol::HttpProtobuf,
            Some("grpc") => Protocol::Grpc,
            Some(other) => {
                return Err(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL={other} is not supported: use http/protobuf or \
                     grpc (trace export is off)"
                ))
            }
        };
        let timeout = match pick("TIMEOUT") {
            None => Duration::from_secs(10),
            Some(ms) => match ms.parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(format!(
                        "OTEL_EXPORTER_OTLP_TIMEOUT={ms} is not a positive number of \
                         milliseconds (trace export is off)"
                    ))
                }
            },
        };
        let client = match (pick("CLIENT_CERTIFICATE"), pick("CLIENT_KEY")) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
            _ => {
                return Err(
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY \
                     go together: set both for mutual TLS, or neither (trace export is off)"
                        .to_owned(),
                )
            }
        };
        let tls = TlsFiles {
            ca: pick("CERTIFICATE").map(PathBuf::from),
            client,
        };
        let names_service = get("OTEL_SERVICE_NAME").is_some()
            || get("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attrs| {
                attrs
                    .split(',')
                    .any(|kv| kv.trim_start().starts_with("service.name="))
            });
        Ok(Some(OtlpSettings {
            protocol,
            endpoint,
            timeout,
            tls,
            default_service_name: (!names_service).then_some("lineage"),
            node: node.map(str::to_owned),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Option<OtlpSettings>, String> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        OtlpSettings::from_env(|k| env.get(k).cloned(), Some("node-1"))
    }

    #[test]
    fn off_without_an_endpoint_or_when_disabled() {
        assert_eq!(settings(&[]), Ok(None));
        assert_eq!(settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]), Ok(None));
        let on = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")];
        assert!(settings(&on).unwrap().is_some());
        for off in [
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(settings(&[on[0], off]), Ok(None), "{off:?}");
        }
    }

    #[test]
    fn the_traces_variables_win_and_defaults_hold() {
        let s = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://b:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/etc/ca.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/etc/me.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/etc/me.key"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "https://b:4317");
        assert_eq!(s.protocol, Protocol::Grpc);
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(s.tls.ca, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(
            s.tls.client,
            Some((PathBuf::from("/etc/me.pem"), PathBuf::from("/etc/me.key")))
        );
        assert_eq!(s.node.as_deref(), Some("node-1"));
        assert_eq!(s.default_service_name, Some("lineage"));

        let plain = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318")])
            .unwrap()
            .unwrap();
        assert_eq!(plain.protocol, Protocol::HttpProtobuf);
        assert_eq!(plain.timeout, Duration::from_secs(10));
        assert_eq!(plain.tls, TlsFiles::default());
        for named in [
            ("OTEL_SERVICE_NAME", "agents"),
            ("OTEL_RESOURCE_ATTRIBUTES", "team=x, service.name=agents"),
        ] {
            let s = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"), named])
                .unwrap()
                .unwrap();
            assert_eq!(s.default_service_name, None, "{named:?}");
        }
    }

    #[test]
    fn what_cannot_work_is_one_line_that_says_what_to_set() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318");
        for (bad, says) in [
            (
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                "use http/protobuf or grpc",
            ),
            (("OTEL_TRACES_EXPORTER", "zipkin"), "set it to otlp or none"),
            (
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
                "positive number of milliseconds",
            ),
            (
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
                "positive number of milliseconds",
            ),
            (("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k"), "set both"),
        ] {
            let err = settings(&[endpoint, bad]).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
            assert!(err.ends_with("(trace export is off)"), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
