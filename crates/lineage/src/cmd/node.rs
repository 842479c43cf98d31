//! `lineage node`: run one node (registry voter or client, plus agent host) until a signal.

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_node::config::{self, FlagOverrides};
use tokio_util::sync::CancellationToken;

use crate::global::Global;
use crate::output::usage;

/// Loads the config (file, `LINEAGE_` env, flags) and runs the node until SIGINT or SIGTERM:
/// then it shuts down gracefully (`shutdown.grace_ms`, see `lineage_node::node::run`); a second
/// signal during that exits at once (the sessions stay resumable, as after a crash).
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
        let mut signals = Signals::new();
        signals.next().await;
        tracing::info!("signal received: shutting down");
        signal.cancel();
        if signals.next_again().await {
            tracing::warn!("second signal: exiting now, without waiting for running turns");
            std::process::exit(1);
        }
    });
    // A config the node can only judge at its start (a sandbox it cannot make, a secret its
    // environment lacks) is bad input like a bad key: exit 2.
    let outcome = lineage_node::node::run(loaded.config, shutdown)
        .await
        .map_err(|e| match e {
            lineage_node::NodeError::Config(_) => usage(e.to_string()),
            other => ControlError::new(ErrorCode::Unavailable, other.to_string()),
        });
    telemetry.shutdown().await;
    outcome
}

/// SIGTERM and SIGINT, listened to once for the whole run: a stream made after a signal came
/// would see that signal again.
struct Signals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let streams = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            };
            Signals { streams }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// The first signal.
    async fn next(&mut self) {
        #[cfg(unix)]
        if let Some((term, int)) = self.streams.as_mut() {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            return;
        }
        crate::client::wait_for_signal().await;
    }

    /// A later signal; false when signals cannot be told apart here (never returns then).
    async fn next_again(&mut self) -> bool {
        #[cfg(unix)]
        if self.streams.is_some() {
            self.next().await;
            return true;
        }
        std::future::pending::<()>().await;
        false
    }
}
