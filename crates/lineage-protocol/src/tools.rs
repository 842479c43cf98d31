//! The tools socket's contract (T1, T5): what a hosting node and `lineage mcp` (the stdio
//! bridge an agent starts as its MCP server) agree on. The node puts [`SOCKET_ENV`] and
//! [`SECRET_ENV`] in the bridge's environment; the bridge connects, sends the secret as its
//! first line and reads one line back: [`GRANTED_LINE`] (MCP follows, as the session the
//! secret names) or [`REFUSED_LINE`] (the connection closes).

/// The environment variable that names the node's tools socket.
pub const SOCKET_ENV: &str = "LINEAGE_MCP_SOCKET";
/// The environment variable that carries the session's secret.
pub const SECRET_ENV: &str = "LINEAGE_MCP_SECRET";
/// The answer to a granted secret; MCP follows.
pub const GRANTED_LINE: &str = "lineage tools: granted";
/// The answer to a secret that names no hosted session; the connection closes.
pub const REFUSED_LINE: &str =
    "lineage tools: refused: this secret names no hosted session (it ended, or it was never granted)";
