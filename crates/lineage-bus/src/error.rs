//! [`BusError`]: the one error enum of `lineage-bus`.

/// What can go wrong on the bus. Messages are one line and say what to do.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The NATS server could not be reached.
    #[error("cannot connect to NATS at {url}: {reason}")]
    Connect {
        /// The URL tried.
        url: String,
        /// The client's reason.
        reason: String,
    },
    /// A connection setting cannot work (a missing file, half-configured TLS or auth); the
    /// message names the key.
    #[error("invalid NATS setting {0}")]
    Config(String),
    /// A protocol value was refused (a cluster name that is not a safe subject token, ...).
    #[error(transparent)]
    Protocol(#[from] lineage_protocol::ProtocolError),
    /// A JetStream operation failed (stream, consumer, publish ack).
    #[error("JetStream {op} failed: {reason}; check that nats-server runs with JetStream (-js)")]
    JetStream {
        /// The operation, e.g. `publish to the parent inbox`.
        op: &'static str,
        /// The server's or client's reason.
        reason: String,
    },
    /// A core NATS publish or request failed.
    #[error("NATS {op} failed: {reason}")]
    Nats {
        /// The operation.
        op: &'static str,
        /// The reason.
        reason: String,
    },
    /// Another writer appended to a session log first (optimistic concurrency on the log).
    #[error("session log of {session} moved on (expected last sequence {expected}); another node owns it now, reload and reclaim")]
    LogConflict {
        /// The session whose log it is.
        session: String,
        /// The sequence this writer expected to be last.
        expected: u64,
    },
    /// A stream's replicas are not what the configuration says, or cannot be had: replicas
    /// other than 1 or 3, an existing stream with fewer replicas (and no update allowed), a
    /// replicated stream on a server that is not part of a large enough JetStream cluster.
    #[error("stream {stream} {problem}")]
    StreamReplicas {
        /// The stream, e.g. `LINEAGE_DEV_EVENTS`.
        stream: String,
        /// What is wrong and what to do, one line.
        problem: String,
    },
    /// A payload could not be decoded or violates a core rule.
    #[error(transparent)]
    Core(#[from] lineage_core::CoreError),
    /// A payload is not valid JSON for its type.
    #[error("malformed {what} JSON: {reason}")]
    Json {
        /// What was being decoded.
        what: &'static str,
        /// serde's reason.
        reason: String,
    },
    /// An operation did not finish within its deadline.
    #[error("{op} timed out after {millis} ms; the server or the peer is overloaded or gone")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The deadline.
        millis: u64,
    },
}

impl BusError {
    pub(crate) fn js(op: &'static str, e: impl std::fmt::Display) -> Self {
        BusError::JetStream {
            op,
            reason: e.to_string(),
        }
    }

    pub(crate) fn nats(op: &'static str, e: impl std::fmt::Display) -> Self {
        BusError::Nats {
            op,
            reason: e.to_string(),
        }
    }
}
