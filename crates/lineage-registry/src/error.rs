//! [`RegistryError`]: the one error enum of `lineage-registry`.
//!
//! Every message is one line that says what went wrong and what to do next.

use std::path::PathBuf;

use crate::types::RegistryRefusal;

/// Everything the registry (node or client) can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    /// The state machine refused the command (a lineage rule, G2); nothing changed.
    #[error("registry refused the command: {0}")]
    Refused(RegistryRefusal),
    /// No registry voter answered, or no leader is known right now.
    #[error("registry unavailable in cluster {cluster}: {reason}; check that registry voters run and a quorum is up, and that --cluster (LINEAGE_CLUSTER) names your cluster")]
    Unavailable {
        /// The cluster name.
        cluster: String,
        /// What was observed last.
        reason: String,
    },
    /// The overall deadline passed before the registry answered.
    #[error("registry request timed out after {after_ms} ms ({last}); the write may or may not have been applied: retry with the same request id")]
    Timeout {
        /// The deadline that passed.
        after_ms: u64,
        /// What the last attempt got (which subject did not answer).
        last: String,
    },
    /// Disk I/O on the redb store failed.
    #[error("registry storage error: {0}; check the disk and the data directory")]
    Storage(String),
    /// The data directory is not a registry store of this cluster and node: refused, never reset.
    #[error("refusing to start on data directory {path}: {reason}; move it away or point data_dir elsewhere")]
    CorruptDataDir {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A payload could not be encoded or decoded.
    #[error("registry codec error: {0}")]
    Codec(String),
    /// A Raft operation (initialize, membership change) failed.
    #[error("raft error: {0}")]
    Raft(String),
    /// A NATS operation failed (subscribe, connect).
    #[error("nats error: {0}; check the NATS connection")]
    Nats(String),
    /// The registry member's configuration is wrong (its direct Raft links); it does not start.
    #[error("registry configuration: {0}")]
    Config(String),
    /// The node is shut down.
    #[error("registry node is shut down")]
    Shutdown,
    /// The registry answered with something this request did not expect (version skew).
    #[error("unexpected registry response: {0}; client and voters may run different versions")]
    Unexpected(String),
}
