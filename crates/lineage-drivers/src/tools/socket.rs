//! The node's tools socket (T1, T5): how an agent process reaches its session's delegation
//! tools, and only its own.
//!
//! One Unix socket per node, in a directory only the node's user can enter. A hosted session
//! whose profile has `tools = true` gets a [`ToolsGrant`]: a fresh 256-bit secret that names
//! it. The agent's MCP server entry (`lineage mcp`, [`ToolsGrant::env`]) connects, sends the
//! secret as its first line, gets [`GRANTED_LINE`] back, and from then on the connection is an
//! MCP session of that lineage session's [`DelegationTools`]. A secret that names no live grant
//! is answered with [`REFUSED_LINE`] and the connection closed: nothing is served (so another agent on the same node,
//! which does not know the secret, cannot act as this session). Dropping the grant revokes it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lineage_core::ids::SessionId;
use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::{DelegationTools, TurnSlot};
use crate::error::DriverError;

pub use lineage_protocol::tools::{GRANTED_LINE, REFUSED_LINE, SECRET_ENV, SOCKET_ENV};

/// The longest first line read (a secret is 64 hex digits).
const MAX_SECRET_LINE: usize = 256;

type Grants = Arc<Mutex<HashMap<String, (SessionId, TurnSlot)>>>;

/// A node's tools socket: listening, and serving each granted session.
#[derive(Debug, Clone)]
pub struct ToolsSocket {
    path: PathBuf,
    grants: Grants,
}

/// A session's right to its tools over the socket; revoked when dropped.
#[derive(Debug)]
pub struct ToolsGrant {
    secret: String,
    path: PathBuf,
    grants: Grants,
}

impl ToolsGrant {
    /// What the agent's `lineage mcp` needs: the socket and the secret, as environment
    /// variables ([`SOCKET_ENV`], [`SECRET_ENV`]).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (SOCKET_ENV.to_owned(), self.path.display().to_string()),
            (SECRET_ENV.to_owned(), self.secret.clone()),
        ]
    }
}

impl Drop for ToolsGrant {
    fn drop(&mut self) {
        if let Ok(mut grants) = self.grants.lock() {
            grants.remove(&self.secret);
        }
    }
}

impl ToolsSocket {
    /// Listens on `dir/tools.sock` (the directory is created, mode 0700; a stale socket file
    /// from an earlier run is replaced) and serves connections until the returned task is
    /// dropped or aborted.
    pub fn bind(dir: &Path) -> Result<(ToolsSocket, tokio::task::JoinHandle<()>), DriverError> {
        let fail = |what: &str, e: std::io::Error| {
            DriverError::ToolsSocket(format!(
                "cannot {what} it in {}: {e}; check that the node's data_dir is writable",
                dir.display()
            ))
        };
        std::fs::create_dir_all(dir).map_err(|e| fail("create the directory of", e))?;
        restrict(dir, 0o700).map_err(|e| fail("restrict the directory of", e))?;
        let path = dir.join("tools.sock");
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail("replace", e)),
        }
        let listener = UnixListener::bind(&path).map_err(|e| fail("bind", e))?;
        restrict(&path, 0o600).map_err(|e| fail("restrict", e))?;
        let socket = ToolsSocket {
            path,
            grants: Arc::default(),
        };
        let grants = socket.grants.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, grants.clone()));
            }
        });
        Ok((socket, task))
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Grants `session` its tools, acting through whatever turn `slot` holds.
    pub fn grant(&self, session: SessionId, slot: TurnSlot) -> ToolsGrant {
        let secret = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        if let Ok(mut grants) = self.grants.lock() {
            grants.insert(secret.clone(), (session, slot));
        }
        ToolsGrant {
            secret,
            path: self.path.clone(),
            grants: self.grants.clone(),
        }
    }
}

fn restrict(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// One connection: the secret line, then MCP as the session it names (or one line and close).
async fn serve(stream: UnixStream, grants: Grants) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = String::new();
    let mut limited = (&mut read).take(MAX_SECRET_LINE as u64);
    let got = limited.read_line(&mut line).await;
    let granted = match got {
        Ok(_) => grants
            .lock()
            .ok()
            .and_then(|g| g.get(line.trim_end()).cloned()),
        Err(_) => None,
    };
    let Some((session, slot)) = granted else {
        let _ = write
            .write_all(format!("{REFUSED_LINE}\n").as_bytes())
            .await;
        let _ = write.shutdown().await;
        return;
    };
    if write
        .write_all(format!("{GRANTED_LINE}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let tools = DelegationTools::new(session.clone(), slot);
    match tools.serve((read, write)).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => {
            tracing::info!(%session, error = %e, "an MCP client of the tools socket did not initialize")
        }
    }
}
