//! [`NatsServer`]: one real `nats-server` on a loopback port, JetStream on, store in a temp
//! dir, killed (by pid) when dropped: the server `lineage dev` runs (and every test suite's);
//! [`free_port`], [`nats_server_binary`] and [`greeting`] (the `INFO` line a server sends
//! first).

use std::io;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The ports [`free_port`] hands out: below Linux's ephemeral range (32768–60999), so a
/// process binding port 0 (a node's tools listener, a client socket) is never given one of them
/// between the pick and the bind; a CI run once lost a node's `/readyz` to a tools listener
/// that the OS had given the port chosen for it.
const PICK_FROM: u32 = 20_000;
const PICK_SPAN: u32 = 12_000;

/// Hands out each port of the range once per process (tests of one binary run in parallel).
static NEXT_PICK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Returns a TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range
/// (see [`PICK_FROM`]); the OS's choice only when that whole range is taken.
pub fn free_port() -> io::Result<u16> {
    let offset = std::process::id().wrapping_mul(2_654_435_761) % PICK_SPAN;
    for _ in 0..PICK_SPAN {
        let n = NEXT_PICK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = PICK_FROM + (offset + n) % PICK_SPAN;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
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
    /// `server_name`: chosen at the first start, kept across restarts (a JetStream cluster
    /// knows its peers by name).
    name: String,
    store: tempfile::TempDir,
    options: NatsOptions,
}

/// How [`NatsServer::start_with`] configures the server beyond port, name and store.
#[derive(Debug, Clone)]
pub struct NatsOptions {
    /// Config text appended to the generated file (nats-server's own format): `authorization
    /// { ... }`, `tls { ... }`, `cluster { ... }`, `ping_interval`, ...
    pub extra_config: String,
    /// JetStream `sync_interval`: `"always"` (the default here: fsync before every ack) or a
    /// duration such as `"2m"` (nats-server's own default).
    pub sync_interval: String,
}

impl Default for NatsOptions {
    fn default() -> Self {
        NatsOptions {
            extra_config: String::new(),
            sync_interval: "always".into(),
        }
    }
}

/// How many ports [`NatsServer::start`] tries when the one it picked was taken meanwhile.
const START_ATTEMPTS: usize = 5;

impl NatsServer {
    /// Starts a server and waits (up to 10 s) until it speaks NATS. A port that another
    /// process took between [`free_port`] and the server's bind (tests run in parallel) costs
    /// a retry on another port, not a failure.
    pub fn start() -> io::Result<Self> {
        Self::start_with(NatsOptions::default())
    }

    /// [`NatsServer::start`] with `options` (extra config text, sync interval).
    pub fn start_with(options: NatsOptions) -> io::Result<Self> {
        let store = tempfile::Builder::new().prefix("lineage-nats-").tempdir()?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let name = unique_name(port);
            match spawn_ready(port, &name, store.path(), &options) {
                Ok(child) => {
                    return Ok(NatsServer {
                        child,
                        port,
                        name,
                        store,
                        options,
                    })
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("nats-server did not start")))
    }

    /// Starts a server on `port` with the store in `store` (a restart keeps JetStream data).
    pub fn start_on(port: u16, store: tempfile::TempDir) -> io::Result<Self> {
        Self::start_on_with(port, store, NatsOptions::default())
    }

    /// [`NatsServer::start_on`] with `options`.
    pub fn start_on_with(
        port: u16,
        store: tempfile::TempDir,
        options: NatsOptions,
    ) -> io::Result<Self> {
        let name = unique_name(port);
        let child = spawn_ready(port, &name, store.path(), &options)?;
        Ok(NatsServer {
            child,
            port,
            name,
            store,
            options,
        })
    }

    /// Stops this server (SIGKILL, by pid) and starts it again on the same port with the same
    /// name, store and options: what a crashed and restarted nats-server looks like to its
    /// clients. Also starts a server stopped with [`NatsServer::kill`].
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.child = spawn_ready(self.port, &self.name, self.store.path(), &self.options)?;
        Ok(())
    }

    /// [`NatsServer::restart`] with other options (say another `sync_interval`); they stay
    /// for later restarts.
    pub fn restart_with(&mut self, options: NatsOptions) -> io::Result<()> {
        self.options = options;
        self.restart()
    }

    /// Kills the server (SIGKILL, by pid) and waits for it to exit; the port, name and store
    /// are kept for [`NatsServer::restart`].
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The options it runs with.
    pub fn options(&self) -> &NatsOptions {
        &self.options
    }

    /// Its `server_name`.
    pub fn name(&self) -> &str {
        &self.name
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
        self.kill();
    }
}

/// A `server_name` no other local server has: readiness then means *this* server answered on
/// its port.
fn unique_name(port: u16) -> String {
    format!(
        "lineage-local-{}-{port}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    )
}

/// Spawns nats-server on `port` as `name` and waits until it is ready; kills it on failure.
fn spawn_ready(port: u16, name: &str, store: &Path, options: &NatsOptions) -> io::Result<Child> {
    let conf = store.join(format!("nats-server-{port}.conf"));
    std::fs::write(&conf, server_config(port, name, store, options))?;
    let mut child = Command::new(nats_server_binary()?)
        .arg("-c")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    match wait_ready(&mut child, port, name, Duration::from_secs(10)) {
        Ok(()) => Ok(child),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// The config file of one local server: loopback, `port`, `name`, JetStream in `store` with the
/// options' sync interval, then the options' extra text.
fn server_config(port: u16, name: &str, store: &Path, options: &NatsOptions) -> String {
    format!(
        "listen: \"127.0.0.1:{port}\"\nserver_name: \"{name}\"\njetstream {{\n  store_dir: {store:?}\n  sync_interval: {sync}\n}}\n{extra}\n",
        store = store.display().to_string(),
        sync = options.sync_interval,
        extra = options.extra_config,
    )
}

/// Waits until the server named `name` greets on `port` (its `INFO` line names it): the port is
/// its, and it speaks NATS. Fails when the process exits first (say the port was taken).
fn wait_ready(child: &mut Child, port: u16, name: &str, limit: Duration) -> io::Result<()> {
    let deadline = Instant::now() + limit;
    let needle = format!("\"server_name\":\"{name}\"");
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "nats-server exited before accepting connections ({status}); is port {port} taken?"
            )));
        }
        if let Ok(info) = greeting(port) {
            if info.starts_with("INFO ") && info.contains(&needle) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nats-server did not answer on port {port} within {limit:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The first line a NATS server sends on a new connection (`INFO {...}`).
pub fn greeting(port: u16) -> io::Result<String> {
    use std::io::BufRead;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut line = String::new();
    io::BufReader::new(stream).read_line(&mut line)?;
    Ok(line)
}
