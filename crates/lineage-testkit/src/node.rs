//! [`NodeProc`]: one real `lineage node` process (its config file, HTTP port and log), and
//! the config text every node of a test cluster gets ([`NodeConfig`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{lineage_bin, poll};

/// One `lineage node` process.
pub struct NodeProc {
    /// The node id (`node-1`, `node-4`, ...).
    pub id: String,
    /// Its config file.
    pub config: PathBuf,
    /// Its HTTP port (`/readyz`, `/metrics`, ...).
    pub http_port: u16,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// Extra environment for the process (e.g. `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub env: Vec<(String, String)>,
    /// The uid (and gid) it runs as, when not the test's own.
    pub uid: Option<u32>,
    child: Option<Child>,
}

/// How a node of a test cluster takes part in the registry.
#[derive(Debug, Clone)]
pub enum Role {
    /// A voter with this raft id; the one with `bootstrap` initializes the group.
    Voter {
        /// Its raft id.
        raft_id: usize,
        /// Whether it initializes the group.
        bootstrap: bool,
    },
    /// A registry client (agent host only).
    Client,
}

/// The config file of one test node: fast raft timings, a 2 s lease.
#[derive(Debug, Clone)]
pub struct NodeConfig<'a> {
    /// The cluster name.
    pub cluster: &'a str,
    /// Its `nats_url` (one URL or a comma-separated list).
    pub nats_url: &'a str,
    /// The node id.
    pub id: &'a str,
    /// Its data dir.
    pub data_dir: &'a Path,
    /// Its HTTP port.
    pub http_port: u16,
    /// Voter or client.
    pub role: Role,
    /// The `voters = { 1 = "node-1", ... }` line of the group.
    pub voters: &'a str,
}

impl NodeConfig<'_> {
    /// The TOML text.
    pub fn render(&self) -> String {
        let registry = match &self.role {
            Role::Voter { raft_id, bootstrap } => format!(
                "role = \"voter\"\nraft_id = {raft_id}\nbootstrap = {bootstrap}\n{voters}\nheartbeat_ms = 50\nelection_min_ms = 300\nelection_max_ms = 600\n",
                voters = self.voters
            ),
            Role::Client => format!("role = \"client\"\nbootstrap = false\n{}\n", self.voters),
        };
        format!(
            "cluster = \"{cluster}\"\nnats_url = \"{url}\"\n\n[node]\nid = \"{id}\"\ndata_dir = \"{data}\"\nhttp_addr = \"127.0.0.1:{port}\"\n\n[registry]\n{registry}\n[lease]\nlease_ms = 2000\nheartbeat_ms = 250\n",
            cluster = self.cluster,
            url = self.nats_url,
            id = self.id,
            data = self.data_dir.display(),
            port = self.http_port,
        )
    }
}

/// The `voters = { 1 = "node-1", ... }` line of `n` voters named `node-1..n`.
pub fn voters_line(n: usize) -> String {
    let voters: Vec<String> = (1..=n).map(|i| format!("{i} = \"node-{i}\"")).collect();
    format!("voters = {{ {} }}", voters.join(", "))
}

impl NodeProc {
    /// A node not started yet (see [`NodeProc::spawn`]).
    pub fn new(
        id: &str,
        config: PathBuf,
        http_port: u16,
        log: PathBuf,
        env: Vec<(String, String)>,
    ) -> NodeProc {
        NodeProc {
            id: id.to_owned(),
            config,
            http_port,
            log,
            env,
            uid: None,
            child: None,
        }
    }

    /// Starts the process against `nats_url`, appending its output to its log.
    pub fn spawn(&mut self, nats_url: &str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open node log");
        let mut command = Command::new(lineage_bin());
        if let Some(uid) = self.uid {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(uid);
        }
        let child = command
            .args(["--nats", nats_url, "node", "--config"])
            .arg(&self.config)
            .env(
                "RUST_LOG",
                "info,lineage=debug,openraft=warn,raft_log=warn,chunked_wal=warn",
            )
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn lineage node");
        self.child = Some(child);
    }

    /// True while the process runs (as far as this handle knows: started and not reaped).
    pub fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// Waits up to `limit` for the process to exit: its exit code (`None`: still running).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let child = self.child.as_mut()?;
        let status = poll(limit, || child.try_wait().ok().flatten()).ok()?;
        self.child = None;
        Some(status.code().unwrap_or(-1))
    }

    /// The node's pid, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL, by pid.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP, by pid: the process keeps its sockets (and so its NATS subscriptions) but
    /// answers nothing until [`NodeProc::cont`]. A stopped node is still SIGKILLed on drop.
    /// Returns once every thread of the process is stopped: the signal is delivered
    /// asynchronously, and a thread in uninterruptible sleep (an fsync, say) stops only when it
    /// returns to user space, so until then the node may still answer a request.
    pub fn stop(&self) {
        self.signal("-STOP");
        if let Some(pid) = self.pid() {
            let stopped = poll(Duration::from_secs(10), || all_threads_stopped(pid));
            assert!(
                stopped.is_ok(),
                "node {} (pid {pid}) did not stop within 10 s",
                self.id
            );
        }
    }

    /// SIGCONT, by pid: a [`NodeProc::stop`]ped node runs again.
    pub fn cont(&self) {
        self.signal("-CONT");
    }

    /// SIGTERM, by pid, without waiting: the node shuts down gracefully (`shutdown.grace_ms`);
    /// [`NodeProc::wait_exit`] waits for it.
    pub fn sigterm(&self) {
        self.signal("-TERM");
    }

    fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let status = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "kill {signal} {pid} failed"
            );
        }
    }

    /// SIGTERM, then wait up to 10 s, then SIGKILL ([`terminate`]).
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            terminate(&mut c, Duration::from_secs(10));
        }
    }

    /// GET a path on the node's HTTP port: (status code, body); `None` when it does not
    /// answer.
    pub fn http_get(&self, path: &str) -> Option<(u16, String)> {
        crate::nats::http_get(self.http_port, path).ok()
    }

    /// The node's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Stops `child` the way an operator does: SIGTERM (when it still runs), up to `within` to
/// exit, then SIGKILL; reaped either way.
pub fn terminate(child: &mut Child, within: Duration) {
    if let Ok(None) = child.try_wait() {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = poll(within, || child.try_wait().ok().flatten());
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Writes `password` to `<dir>/nats-<user>.password` (mode 0600) and returns the path.
pub fn write_password_file(dir: &Path, user: &str, password: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(format!("nats-{user}.password"));
    std::fs::write(&path, password).expect("write password file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    path
}

/// The environment that makes a `lineage node` connect as NATS `user`: `LINEAGE_NATS__USER`
/// and `LINEAGE_NATS__PASSWORD_FILE`.
pub fn nats_user_env(user: &str, password_file: &Path) -> Vec<(String, String)> {
    vec![
        ("LINEAGE_NATS__USER".into(), user.into()),
        (
            "LINEAGE_NATS__PASSWORD_FILE".into(),
            password_file.display().to_string(),
        ),
    ]
}

/// True when every thread of `pid` is in the stopped state (`T` in `/proc/<pid>/task/*/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command name, which is in parentheses and may hold spaces.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state == "T" || state == "t")
        })
    })
}
