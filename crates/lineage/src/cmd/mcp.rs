//! `lineage mcp` (T1, T5): the stdio MCP server an agent starts from the `mcpServers` of its
//! ACP `session/new`: a bridge from its stdin and stdout to the hosting node's tools socket, as
//! the session whose secret the node put in its environment (`LINEAGE_MCP_SOCKET`,
//! `LINEAGE_MCP_SECRET`). The MCP server itself (the tools, their schemas) runs in the node
//! (`lineage_drivers::tools`); this only moves bytes, after the node granted the secret.

use lineage_bus::control::ControlError;
use lineage_protocol::envelope::ErrorCode;
use lineage_protocol::tools::{GRANTED_LINE, SECRET_ENV, SOCKET_ENV};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::output::usage;

/// Connects, presents the secret, and copies both ways until either side closes.
pub(crate) async fn run() -> Result<(), ControlError> {
    let var = |name: &str| {
        std::env::var(name).map_err(|_| {
            usage(format!(
                "{name} is not set: lineage mcp runs as a hosted agent's MCP server, started by the node that hosts it (a profile with tools = true)"
            ))
        })
    };
    let socket = var(SOCKET_ENV)?;
    let secret = var(SECRET_ENV)?;
    let stream = UnixStream::connect(&socket).await.map_err(|e| {
        ControlError::new(
            ErrorCode::Unavailable,
            format!(
                "cannot reach the node's tools socket {socket}: {e}; is the hosting node running?"
            ),
        )
    })?;
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let closed = |e: std::io::Error| {
        ControlError::new(
            ErrorCode::Unavailable,
            format!("the node's tools socket closed: {e}"),
        )
    };
    write
        .write_all(format!("{secret}\n").as_bytes())
        .await
        .map_err(closed)?;
    let mut first = String::new();
    read.read_line(&mut first).await.map_err(closed)?;
    if first.trim_end() != GRANTED_LINE {
        let said = first.trim_end();
        return Err(ControlError::new(
            ErrorCode::Refused,
            match said.is_empty() {
                true => "the node closed the tools socket without an answer".to_owned(),
                false => said.to_owned(),
            },
        ));
    }
    let mut stdin = tokio::io::stdin();
    let mut stdout = tokio::io::stdout();
    let to_node = async {
        let _ = tokio::io::copy(&mut stdin, &mut write).await;
        let _ = write.shutdown().await;
    };
    let from_node = async {
        let _ = tokio::io::copy(&mut read, &mut stdout).await;
        let _ = stdout.flush().await;
    };
    // The agent closing its end (stdin) or the node closing the socket ends the bridge.
    tokio::select! {
        () = to_node => {}
        () = from_node => {}
    }
    Ok(())
}
