//! Test helpers for lineage: real processes, never stand-ins.
//!
//! - [`NatsServer`]: a real `nats-server` on a free loopback port, JetStream on, store in a temp
//!   dir, killed (by pid) when dropped.
//! - [`nats_server_binary`]: where the `nats-server` binary is (`NATS_SERVER_BIN`, `PATH`,
//!   `~/go/bin`); `scripts/install-deps.sh` installs it when missing.
//! - [`free_port`]: a free TCP port on 127.0.0.1.

#![deny(missing_docs)]

use std::io;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Returns a TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Finds the `nats-server` binary: `$NATS_SERVER_BIN`, then `PATH`, then `~/go/bin`.
pub fn nats_server_binary() -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os("NATS_SERVER_BIN") {
        return Ok(PathBuf::from(p));
    }
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("nats-server"))
                .collect()
        })
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join("go/bin/nats-server"));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "nats-server not found on PATH or in ~/go/bin; run scripts/install-deps.sh or set NATS_SERVER_BIN",
        )
    })
}

/// A real `nats-server` with JetStream, on a free loopback port, with its store in a temp dir.
///
/// Dropping it kills the process (by its pid) and removes the store.
pub struct NatsServer {
    child: Child,
    port: u16,
    store: tempfile::TempDir,
}

impl NatsServer {
    /// Starts a server and waits (up to 10 s) until it accepts connections.
    pub fn start() -> io::Result<Self> {
        let store = tempfile::Builder::new().prefix("lineage-nats-").tempdir()?;
        let port = free_port()?;
        Self::start_on(port, store)
    }

    /// Starts a server on `port` with the store in `store` (a restart keeps JetStream data).
    pub fn start_on(port: u16, store: tempfile::TempDir) -> io::Result<Self> {
        let child = Command::new(nats_server_binary()?)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(store.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut server = NatsServer { child, port, store };
        server.wait_ready(Duration::from_secs(10))?;
        Ok(server)
    }

    fn wait_ready(&mut self, limit: Duration) -> io::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "nats-server exited before accepting connections ({status}); is port {} taken?",
                    self.port
                )));
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "nats-server did not accept connections on port {} within {limit:?}",
                        self.port
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid (for fault tests that stop it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The JetStream store directory.
    pub fn store_dir(&self) -> &Path {
        self.store.path()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
