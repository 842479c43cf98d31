//! Logging (O2): readable lines on a terminal, JSON lines otherwise; `RUST_LOG` filters
//! (default `info`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls are no-ops.
pub fn init() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if std::io::stderr().is_terminal() {
        builder.compact().try_init()
    } else {
        builder.json().with_current_span(true).try_init()
    };
    let _ = result;
}
