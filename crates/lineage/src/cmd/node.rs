//! `lineage node`: run one node (registry voter or client, plus agent host) until a signal.

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_node::config::{self, FlagOverrides};
use tokio_util::sync::CancellationToken;

use crate::cli::Global;
use crate::output::usage;

/// Loads the config (file, `LINEAGE_` env, flags) and runs the node until SIGINT or SIGTERM.
pub(crate) async fn run(g: &Global, file: Option<std::path::PathBuf>) -> Result<(), ControlError> {
    let flags = FlagOverrides {
        nats_url: g.nats.clone(),
        cluster: g.cluster.clone(),
        nats: crate::nats_auth::node_overrides(g)?,
        from_env: g.from_env.clone(),
    };
    let loaded = config::load(file.as_deref(), &flags).map_err(|e| usage(e.to_string()))?;
    let telemetry = crate::telemetry::init(Some(&loaded.config.node.id));
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        super::wait_for_signal().await;
        tracing::info!("signal received: shutting down");
        signal.cancel();
    });
    let outcome = lineage_node::node::run(loaded.config, shutdown)
        .await
        .map_err(|e| ControlError::new(ErrorCode::Unavailable, e.to_string()));
    telemetry.shutdown().await;
    outcome
}
