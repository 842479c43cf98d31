//! [`DriverError`]: the one error enum of `lineage-drivers`.
//!
//! Every message is one line that says what was wrong and what to do next. The host turns each
//! variant into its own error (`lineage_host::HostError` has a `From<DriverError>`), keeping the
//! text, so a user sees the same line whichever layer refused.

/// Everything making, starting or running a driver can fail with. Returned, never panicked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// The agent spec, profile, command line or working directory is invalid or refused on this
    /// node; nothing was started.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The agent failed: it could not be started, its connection broke, it missed a deadline or
    /// it answered out of protocol. `reason` names the program and what to check.
    #[error("agent {session} failed: {reason}")]
    Agent {
        /// The hosted session (`-` before the driver started).
        session: String,
        /// What went wrong, one line.
        reason: String,
    },
    /// This node cannot run this kind of driver (for example ACP on a script-only node).
    #[error(
        "driver {0} is not available on this node; configure it or place the child on another node"
    )]
    Unavailable(String),
    /// The node's tools socket (lineage's MCP tools for hosted agents) cannot be set up; the
    /// message says where and what to check.
    #[error("tools socket: {0}")]
    ToolsSocket(String),
    /// An invariant of a driver broke (a bug); the message says which.
    #[error("internal error: {0}; this is a bug, please report it")]
    Internal(String),
}
