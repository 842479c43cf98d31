//! The node's tools socket (T1, T5): how an agent process reaches its session's delegation
//! tools, and only its own.
//!
//! One Unix socket per node, in a directory only the node's user can enter. A hosted session
//! whose profile has `tools = true` gets a [`ToolsGrant`]: a fresh 256-bit secret that names
//! it. The agent's MCP server entry (`lineage mcp`, [`ToolsGrant::env`]) connects, sends the
//! secret as its first line, gets [`GRANTED_LINE`] back, and from then on the connection is an
//! MCP session of that lineage session's [`DelegationTools`]. A secret that names no live grant
//! is answered with [`REFUSED_LINE`] and the connection closed: nothing is served (so another
//! agent on the same node, which does not know the secret, cannot act as this session).
//! Dropping the grant revokes it.
//!
//! A secret alone is not enough (V1): the grant is bound to the session's processes
//! ([`ToolsGrant::bind`], a [`Confinement`]: its sandbox, else its process tree) as soon as the
//! agent runs, and the node asks the kernel who connected (`SO_PEERCRED`). A connection from any
//! other process is refused with [`FOREIGN_LINE`], whatever secret it presents, and the attempt
//! is logged with the session the intruder belongs to, when it is one of the node's; a grant
//! not bound yet serves nobody.
//!
//! The same grants also open the node's streamable HTTP listener ([`super::http`], loopback
//! only, for agents that declare `mcpCapabilities.http`): there the secret is the bearer token.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lineage_core::ids::SessionId;
use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::{DelegationTools, TurnSlot};
use crate::error::DriverError;
use crate::sandbox::Confinement;

pub use lineage_protocol::tools::{GRANTED_LINE, REFUSED_LINE, SECRET_ENV, SOCKET_ENV};

/// The answer to a live secret presented by a process that is not its session's (V1).
pub const FOREIGN_LINE: &str = "lineage tools: refused: this connection does not come from the session the secret names (a secret is bound to its session's own processes)";

/// The longest first line read (a secret is 64 hex digits).
const MAX_SECRET_LINE: usize = 256;

/// What a live secret names: the session, its turn slot, and its MCP service over HTTP.
#[derive(Clone)]
pub(super) struct Granted {
    pub(super) session: SessionId,
    pub(super) slot: TurnSlot,
    pub(super) http: Option<super::http::SessionService>,
    /// The session's processes, once its agent runs ([`ToolsGrant::bind`]).
    pub(super) confinement: Option<Confinement>,
}

pub(super) type Grants = Arc<Mutex<HashMap<String, Granted>>>;

impl std::fmt::Debug for Granted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Granted")
            .field("session", &self.session)
            .field("http", &self.http.is_some())
            .finish()
    }
}

/// A node's tools socket: listening, and serving each granted session. `Debug` shows how many
/// grants are live, never their secrets.
#[derive(Clone)]
pub struct ToolsSocket {
    path: PathBuf,
    grants: Grants,
    /// The HTTP listener's base URL, once [`ToolsSocket::serve_http`] bound it.
    http: Option<String>,
}

/// A session's right to its tools over the socket (and HTTP); revoked when dropped. `Debug`
/// hides the secret.
pub struct ToolsGrant {
    secret: String,
    path: PathBuf,
    http: Option<String>,
    grants: Grants,
}

/// How an agent reaches its tools over streamable HTTP: the URL and the headers to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpEntry {
    /// The MCP endpoint (`http://127.0.0.1:PORT/mcp`).
    pub url: String,
    /// `Authorization: Bearer <secret>`.
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for ToolsSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let live = self.grants.lock().map(|g| g.len()).unwrap_or_default();
        f.debug_struct("ToolsSocket")
            .field("path", &self.path)
            .field("http", &self.http)
            .field("live_grants", &live)
            .finish()
    }
}

impl std::fmt::Debug for ToolsGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolsGrant")
            .field("path", &self.path)
            .field("http", &self.http)
            .field("secret", &"<redacted>")
            .finish()
    }
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

    /// Binds the grant to the session's processes (V1): from now on only a connection from
    /// one of them is served.
    pub fn bind(&self, confinement: Confinement) {
        if let Ok(mut grants) = self.grants.lock() {
            if let Some(granted) = grants.get_mut(&self.secret) {
                granted.confinement = Some(confinement);
            }
        }
    }

    /// The HTTP entry of this grant, when the node serves its tools over HTTP.
    pub fn http(&self) -> Option<HttpEntry> {
        self.http.as_ref().map(|url| HttpEntry {
            url: url.clone(),
            headers: vec![(
                "Authorization".to_owned(),
                format!("Bearer {}", self.secret),
            )],
        })
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
            http: None,
        };
        let grants = socket.grants.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, grants.clone()));
            }
        });
        Ok((socket, task))
    }

    /// Lets other users connect (directory 0711, socket 0666): on a node whose sandboxes run
    /// as uids of their own (V2). A connection is still served only to the processes of the
    /// session whose secret it presents ([`ToolsGrant::bind`]).
    pub fn open_to_other_users(&self) -> Result<(), DriverError> {
        let fail = |e: std::io::Error| {
            DriverError::ToolsSocket(format!(
                "cannot open {} to the sandboxes' users: {e}",
                self.path.display()
            ))
        };
        if let Some(dir) = self.path.parent() {
            restrict(dir, 0o711).map_err(fail)?;
        }
        restrict(&self.path, 0o666).map_err(fail)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Also serves the granted sessions' tools over streamable HTTP on `listen` (a loopback
    /// address; port 0 picks one): grants made from now on carry an [`HttpEntry`]. Serves
    /// until the returned task is dropped or aborted.
    pub fn serve_http(
        &mut self,
        listen: std::net::SocketAddr,
    ) -> Result<tokio::task::JoinHandle<()>, DriverError> {
        let (url, task) = super::http::serve(listen, self.grants.clone())?;
        self.http = Some(url);
        Ok(task)
    }

    /// The HTTP listener's MCP endpoint, when [`ToolsSocket::serve_http`] bound one.
    pub fn http_url(&self) -> Option<&str> {
        self.http.as_deref()
    }

    /// Grants `session` its tools, acting through whatever turn `slot` holds; over HTTP too
    /// when `http` (and the node serves HTTP). A sandboxed session's grant is socket only: an
    /// HTTP request cannot be bound to the process that sent it (V1).
    pub fn grant(&self, session: SessionId, slot: TurnSlot, http: bool) -> ToolsGrant {
        let secret = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let http_url = self.http.clone().filter(|_| http);
        let http = http_url
            .as_ref()
            .map(|_| super::http::session_service(session.clone(), slot.clone()));
        if let Ok(mut grants) = self.grants.lock() {
            grants.insert(
                secret.clone(),
                Granted {
                    session,
                    slot,
                    http,
                    confinement: None,
                },
            );
        }
        ToolsGrant {
            secret,
            path: self.path.clone(),
            http: http_url,
            grants: self.grants.clone(),
        }
    }
}

fn restrict(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// One connection: the secret line, then MCP as the session it names when the peer is one of
/// its processes (or one line and close).
async fn serve(stream: UnixStream, grants: Grants) {
    let peer = stream.peer_cred().ok().and_then(|c| c.pid());
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
    let Some(Granted {
        session,
        slot,
        confinement,
        ..
    }) = granted
    else {
        let intruder = peer.and_then(|pid| session_of(&grants, pid));
        tracing::info!(pid = ?peer, intruder = ?intruder.as_ref().map(SessionId::as_str), "tools socket: a secret that names no hosted session: refused");
        return refuse(&mut write, REFUSED_LINE).await;
    };
    let bound = match (confinement, peer) {
        (Some(confinement), Some(pid)) => confinement.holds(pid),
        _ => false,
    };
    if !bound {
        let intruder = peer.and_then(|pid| session_of(&grants, pid));
        tracing::warn!(
            target_session = %session,
            pid = ?peer,
            intruder = %intruder.as_ref().map_or("none of this node's sessions", SessionId::as_str),
            "tools socket: the secret of a session presented by a process that is not its own: refused (V1)"
        );
        return refuse(&mut write, FOREIGN_LINE).await;
    }
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

/// The session whose processes include `pid`, when it is one of the node's.
fn session_of(grants: &Grants, pid: i32) -> Option<SessionId> {
    let bound: Vec<(SessionId, Confinement)> = grants
        .lock()
        .ok()?
        .values()
        .filter_map(|g| Some((g.session.clone(), g.confinement?)))
        .collect();
    bound
        .into_iter()
        .find(|(_, confinement)| confinement.holds(pid))
        .map(|(session, _)| session)
}

/// Answers `line` and closes the connection.
async fn refuse(write: &mut tokio::net::unix::OwnedWriteHalf, line: &str) {
    let _ = write.write_all(format!("{line}\n").as_bytes()).await;
    let _ = write.shutdown().await;
}
