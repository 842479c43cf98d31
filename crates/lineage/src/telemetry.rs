//! Logging and trace export (O2, U2).
//!
//! - Logs: readable lines on a terminal, JSON lines otherwise (`message` and the event's
//!   fields at the top level), on stderr; `RUST_LOG` filters (default `info,openraft=warn,raft_log=warn,chunked_wal=warn`);
//!   openraft's expected RPC timeouts are counted, not logged
//!   (`lineage_node::raft_noise`). Only `lineage node` logs; other verbs print their result.
//! - Traces: when the standard `OTEL_*` variables ask for it (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//!   ...; see `lineage_node::otlp`), spans of the lineage crates at `info` and above go to
//!   that collector over OTLP (http/protobuf or gRPC, TLS), whatever `RUST_LOG` says.

use std::io::IsTerminal;
use std::time::Duration;

use lineage_node::otlp::{self, OtlpHandle, OtlpSettings};
use tracing_subscriber::filter::{FilterExt, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// What [`init`] installed; [`Telemetry::shutdown`] flushes the exporter.
#[derive(Debug, Default)]
pub struct Telemetry {
    otlp: Option<OtlpHandle>,
}

impl Telemetry {
    /// True when spans are exported.
    pub fn exporting(&self) -> bool {
        self.otlp.is_some()
    }

    /// Sends the spans still queued (waits at most 3 s).
    pub async fn shutdown(self) {
        if let Some(handle) = self.otlp {
            handle.shutdown(Duration::from_secs(3)).await;
        }
    }
}

/// The exporter when the environment asks for one; otherwise why not (one line), if it asked
/// for one that cannot work.
fn otlp_export(node: Option<&str>) -> (Option<OtlpHandle>, Option<String>) {
    let started = OtlpSettings::from_env(|name| std::env::var(name).ok(), node)
        .and_then(|settings| settings.map(|s| otlp::start(&s)).transpose());
    match started {
        Ok(handle) => (handle, None),
        Err(why) => (None, Some(why)),
    }
}

/// What the exporter sees: the lineage crates' spans at `info` and above.
fn otlp_filter() -> Targets {
    Targets::new().with_target("lineage", tracing::Level::INFO)
}

/// `lineage node`: logs plus, when configured, OTLP export with `lineage.node = node`.
/// Installs the global subscriber once; later calls install nothing.
pub fn init(node: Option<&str>) -> Telemetry {
    // The registry's Raft log (`raft-log`, `chunked-wal`, through the `log` bridge) says at
    // info when it takes its directory lock, rotates a chunk or purges: warnings and up only.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn,raft_log=warn,chunked_wal=warn"));
    // openraft's expected RPC timeouts are counted, not logged (raft_noise).
    let filter = filter.and(lineage_node::raft_noise::RaftTimeouts);
    let logs = if std::io::stderr().is_terminal() {
        tracing_subscriber::fmt::layer()
            .compact()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    };
    let (handle, warning) = otlp_export(node);
    let installed = tracing_subscriber::registry()
        .with(logs)
        .with(
            handle
                .as_ref()
                .map(|h| h.layer().with_filter(otlp_filter())),
        )
        .try_init()
        .is_ok();
    if let Some(why) = warning {
        tracing::warn!("{why}");
    }
    let handle = handle.filter(|_| installed);
    if let Some(h) = &handle {
        h.register_global();
        tracing::info!("OTLP trace export on");
    }
    Telemetry { otlp: handle }
}

/// The other verbs: no logs, only the OTLP exporter when configured (so the command's `cli`
/// span joins the trace its requests start).
pub fn init_cli() -> Telemetry {
    let (handle, warning) = otlp_export(None);
    if let Some(why) = warning {
        eprintln!("warning: {why}");
    }
    let Some(handle) = handle else {
        return Telemetry::default();
    };
    let installed = tracing_subscriber::registry()
        .with(handle.layer().with_filter(otlp_filter()))
        .try_init()
        .is_ok();
    Telemetry {
        otlp: installed.then_some(handle),
    }
}
