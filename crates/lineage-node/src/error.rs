//! [`NodeError`]: the one error enum of `lineage-node`.

/// Why a node could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The configuration is invalid; the message names the key and its source.
    #[error("{0}")]
    Config(String),
    /// The bus failed (NATS unreachable, JetStream missing).
    #[error(transparent)]
    Bus(#[from] lineage_bus::BusError),
    /// The registry failed to start or answer.
    #[error("registry: {0}")]
    Registry(String),
    /// The host failed.
    #[error("host: {0}")]
    Host(String),
    /// An OS-level failure (binding the HTTP port, the data dir).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}
