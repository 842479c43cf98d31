//! The warm sandbox's launch line (V2): what a hosting node and `lineage-sandbox-exec` agree on.
//!
//! A node keeps a sandbox ready per sandboxed profile, its first program
//! `lineage-sandbox-exec` waiting on its stdin. When a session claims it, the node writes one line, a
//! [`SandboxLaunch`] as JSON, and `lineage-sandbox-exec` replaces itself with the agent (`execve`):
//! the agent inherits the stdin and stdout the node speaks ACP over. Only the node writes
//! that line (the pipe is the node's); nothing from the wire reaches it.

use serde::{Deserialize, Serialize};

/// The longest launch line `lineage-sandbox-exec` reads (bytes).
pub const MAX_LAUNCH_LINE: usize = 1 << 20;

/// What the waiting sandbox runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxLaunch {
    /// Program (an absolute path or a name on `PATH` of `env`), then arguments.
    pub argv: Vec<String>,
    /// The agent's whole environment.
    pub env: Vec<(String, String)>,
    /// Its working directory.
    pub cwd: String,
}
