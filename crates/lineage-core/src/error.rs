//! [`CoreError`]: the one error enum of `lineage-core`.
//!
//! Every message is one line that says what was wrong and what to do about it, because these
//! errors reach users unchanged through the CLI and the NATS service.

use crate::depth::SubagentDepthError;

/// Everything the core can refuse. Each variant is returned, never panicked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// An id is not a safe NATS subject token, or not UUID/ULID text where one is required.
    #[error("invalid {kind} {input:?}: {reason}; {}", id_hint(kind))]
    InvalidId {
        /// Which id: "session id", "run id", "node id", "request id".
        kind: &'static str,
        /// The refused input (shortened to 80 characters).
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A depth-like number (max depth, delegation depth, seed length) is not a non-negative safe
    /// integer (D4, L2).
    #[error("invalid {field}: {reason}; it must be a non-negative integer no larger than 2^53-1")]
    InvalidNumber {
        /// The field that carried the value, e.g. `max_depth`.
        field: String,
        /// What is wrong: negative, fractional, negative zero, a string, too large.
        reason: String,
    },
    /// The parent's depth plus one does not fit in a safe integer (D3).
    #[error("subagent child depth exceeds the safe-integer range (parent depth {parent_depth}); the lineage is corrupt or runaway")]
    DepthOverflow {
        /// The parent's delegation depth.
        parent_depth: u64,
    },
    /// The child would be deeper than the allowed maximum (D3).
    #[error(transparent)]
    Depth(#[from] SubagentDepthError),
    /// A session header is malformed (L2); it is refused, never turned into a top-level session.
    #[error("invalid session header field {field}: {reason}")]
    InvalidHeader {
        /// The offending field, e.g. `origin`.
        field: &'static str,
        /// What is wrong and what it must be.
        reason: String,
    },
    /// A wire payload could not be decoded (N3).
    #[error("invalid {what} payload: {reason}")]
    InvalidPayload {
        /// Which payload kind, e.g. `subagent-report`.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A wire payload carries a version this build does not speak (N3).
    #[error("unsupported {what} version {found}; this build speaks version {supported}, upgrade the sender or the receiver")]
    UnsupportedVersion {
        /// Which payload kind.
        what: &'static str,
        /// The `v` that was received.
        found: u64,
        /// The `v` this build writes and reads.
        supported: u64,
    },
    /// An event does not apply in the activation's current state (X2).
    #[error("activation of {session} cannot take {event} while {state}")]
    IllegalTransition {
        /// The child session.
        session: String,
        /// The current state, e.g. `settled`.
        state: &'static str,
        /// The refused event.
        event: &'static str,
    },
    /// An interrupt (or other control) was refused because the caller has no authority (M4).
    #[error("not authorized: {reason}")]
    NotAuthorized {
        /// Why the claim was refused.
        reason: String,
    },
    /// A session event log is inconsistent (sequence gap, seed length past the end).
    #[error("invalid session log for {session}: {reason}")]
    InvalidLog {
        /// The session whose log it is.
        session: String,
        /// What is inconsistent.
        reason: String,
    },
    /// A lineage tree handed to a planner is inconsistent (a cycle, a link to a missing session).
    #[error("invalid lineage tree: {reason}")]
    InvalidTree {
        /// What is inconsistent.
        reason: String,
    },
}

/// What a valid id of `kind` looks like, for the one-line error.
fn id_hint(kind: &str) -> &'static str {
    match kind {
        "session id" | "run id" => "use UUIDv7 (or ULID) text, as `lineage spawn` prints it",
        _ => "use letters, digits, '-' and '_' (one NATS subject token, at most 64 characters)",
    }
}
