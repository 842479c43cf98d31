//! The local cluster `lineage dev` starts: a nats-server and N `lineage node` processes
//! ([`DevCluster`], [`DevNode`]), and the helpers the lab's benchmarks share with it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lineage_bus::control::{ControlError, ErrorCode};

use crate::output::usage;

/// A node process started by `dev`; killed (by pid) when dropped.
pub struct DevNode {
    /// Node id.
    pub id: String,
    /// Its config file.
    pub config: PathBuf,
    /// Its HTTP port.
    pub http_port: u16,
    /// Its log file.
    pub log: PathBuf,
    /// The process.
    pub child: Option<Child>,
}

impl DevNode {
    /// Starts (or restarts) the process.
    pub fn start(&mut self, nats_url: &str) -> Result<(), ControlError> {
        let exe = lineage_program().map_err(|e| {
            ControlError::new(ErrorCode::Internal, format!("cannot find own binary: {e}"))
        })?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| usage(format!("cannot open {}: {e}", self.log.display())))?;
        let err = log
            .try_clone()
            .map_err(|e| usage(format!("cannot open {}: {e}", self.log.display())))?;
        let child = Command::new(exe)
            .args(["--nats", nats_url, "node", "--config"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                ControlError::new(ErrorCode::Internal, format!("cannot start a node: {e}"))
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL by pid.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// True when `/readyz` answers 200.
    pub async fn ready(&self) -> bool {
        matches!(http_get(self.http_port, "/readyz").await, Some((200, _)))
    }
}

/// `GET path` on a local node's HTTP port: status and body, `None` when it does not answer
/// (connect within 2 s, the whole answer within 5 s).
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?;
    let reply = client
        .get(format!("http://127.0.0.1:{port}{path}"))
        .send()
        .await
        .ok()?;
    let status = reply.status().as_u16();
    Some((status, reply.text().await.ok()?))
}

impl Drop for DevNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `lineage` program a local cluster's nodes run: this program, or the `lineage` beside it
/// when this is another (the lab, `lineage-lab`, starts clusters of `lineage` nodes).
pub fn lineage_program() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let beside = exe.with_file_name("lineage");
    if exe.file_name() != beside.file_name() && beside.is_file() {
        return Ok(beside);
    }
    Ok(exe)
}

/// How a local cluster's voters carry their Raft RPCs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaftLinks {
    /// Voter to voter over TCP (`[registry.direct]`, a token generated for the cluster): the
    /// default, two broker hops shorter per registry write.
    Direct,
    /// Through nats-server, where `nats sub 'lineage.<cluster>.raft.>'` shows them.
    Nats,
}

/// A running local cluster.
pub struct DevCluster {
    /// The NATS server.
    pub nats: lineage_bus::local_server::NatsServer,
    /// The nodes.
    pub nodes: Vec<DevNode>,
    /// The working directory.
    pub dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl DevCluster {
    /// Starts nats-server and `n` voter nodes, waits until all are ready.
    pub async fn start(
        n: u8,
        dir: Option<PathBuf>,
        nats_port: Option<u16>,
        cluster: &str,
        links: RaftLinks,
    ) -> Result<DevCluster, ControlError> {
        if ![1u8, 3, 5].contains(&n) {
            return Err(usage(format!(
                "--nodes {n}: a local cluster has 1, 3 or 5 nodes (all registry voters)"
            )));
        }
        let (dir, temp) = match dir {
            Some(d) => (d, None),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("lineage-dev-")
                    .tempdir()
                    .map_err(|e| usage(format!("cannot create a temp dir: {e}")))?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| usage(format!("cannot create {}: {e}", dir.display())))?;
        // NATS' own port when it is free (every client defaults to it), else any free one.
        let port = match nats_port {
            Some(p) => p,
            None if std::net::TcpListener::bind(("127.0.0.1", 4222)).is_ok() => 4222,
            None => lineage_bus::local_server::free_port()
                .map_err(|e| usage(format!("no free port: {e}")))?,
        };
        // nats-server's store lives with the nodes' data, under the cluster's directory; kept
        // after exit when that directory is the user's (`--dir`), like the nodes' data and logs.
        let store = tempfile::Builder::new()
            .prefix("nats-")
            .disable_cleanup(temp.is_none())
            .tempdir_in(&dir)
            .map_err(|e| {
                usage(format!(
                    "cannot create nats-server's store in {}: {e}",
                    dir.display()
                ))
            })?;
        let nats = lineage_bus::local_server::NatsServer::start_on(port, store).map_err(|e| {
            ControlError::new(
                ErrorCode::Unavailable,
                match std::net::TcpListener::bind(("127.0.0.1", port)) {
                    Err(_) => format!(
                        "cannot start nats-server: port {port} is taken; pick another with \
                         --nats-port, or leave it out for a free one"
                    ),
                    Ok(_) => format!("cannot start nats-server: {e}"),
                },
            )
        })?;
        let voters: Vec<String> = (1..=n).map(|i| format!("{i} = \"node-{i}\"")).collect();
        let direct = match links {
            RaftLinks::Direct => Some(direct_links(&dir, n)?),
            RaftLinks::Nats => None,
        };
        let mut nodes = Vec::new();
        for i in 1..=n {
            let http_port = lineage_bus::local_server::free_port()
                .map_err(|e| usage(format!("no free port: {e}")))?;
            let config = dir.join(format!("node-{i}.toml"));
            let text = format!(
                "# written by `lineage dev`\ncluster = \"{cluster}\"\nnats_url = \"{url}\"\n\n[node]\nid = \"node-{i}\"\ndata_dir = \"{data}\"\nhttp_addr = \"127.0.0.1:{http_port}\"\n\n[registry]\nrole = \"voter\"\nraft_id = {i}\nbootstrap = {boot}\nvoters = {{ {voters} }}\nheartbeat_ms = 50\nelection_min_ms = 300\nelection_max_ms = 600\n{direct}\n[lease]\nlease_ms = 2000\nheartbeat_ms = 250\n\n# A root idle this long is drained (stop reason idle); spawn --idle-ttl wins.\n[limits]\nidle_root_ms = {idle}\n\n# Development only: requests may name a raw agent command line.\n[agents]\nallow_raw_commands = true\n{testagent}",
                testagent = testagent_profile(),
                direct = direct.as_ref().map(|d| d.section(i)).unwrap_or_default(),
                idle = DEV_IDLE_ROOT_MS,
                url = nats.url(),
                data = dir.join(format!("data-{i}")).display(),
                boot = i == 1,
                voters = voters.join(", "),
            );
            std::fs::write(&config, text)
                .map_err(|e| usage(format!("cannot write {}: {e}", config.display())))?;
            nodes.push(DevNode {
                id: format!("node-{i}"),
                config,
                http_port,
                log: dir.join(format!("node-{i}.log")),
                child: None,
            });
        }
        let url = nats.url();
        for node in &mut nodes {
            node.start(&url)?;
        }
        let cluster = DevCluster {
            nats,
            nodes,
            dir,
            _temp: temp,
        };
        cluster.wait_ready(Duration::from_secs(90)).await?;
        Ok(cluster)
    }

    /// Waits until every running node is ready.
    pub async fn wait_ready(&self, limit: Duration) -> Result<(), ControlError> {
        let deadline = Instant::now() + limit;
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            while !node.ready().await {
                if Instant::now() > deadline {
                    return Err(ControlError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "{} not ready within {limit:?}; see {}",
                            node.id,
                            node.log.display()
                        ),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }
}

/// A scripted agent that replies with its prompt; `lineage a2a` offers it as an A2A agent.
const ECHO_PROFILE: &str =
    "\n[agents.echo]\ndriver = \"script\"\na2a = true\ndescription = \"replies with its prompt\"\n";

/// `limits.idle_root_ms` of a `lineage dev` cluster: 30 minutes.
pub const DEV_IDLE_ROOT_MS: u64 = 30 * 60 * 1000;

/// The voters' direct Raft links of a local cluster: a free loopback port each and one token,
/// written to `raft-token` in the cluster's directory (readable by its owner only).
struct DirectLinks {
    ports: Vec<u16>,
    token_file: PathBuf,
}

fn direct_links(dir: &std::path::Path, n: u8) -> Result<DirectLinks, ControlError> {
    let ports = (0..n)
        .map(|_| lineage_bus::local_server::free_port())
        .collect::<Result<Vec<u16>, _>>()
        .map_err(|e| usage(format!("no free port: {e}")))?;
    let secret = lineage_registry::network::direct::handshake::nonce()
        .map_err(|e| ControlError::new(ErrorCode::Internal, e.to_string()))?;
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let token_file = dir.join("raft-token");
    let written = {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&token_file)
            .and_then(|mut f| f.write_all(hex.as_bytes()))
    };
    written.map_err(|e| usage(format!("cannot write {}: {e}", token_file.display())))?;
    Ok(DirectLinks { ports, token_file })
}

impl DirectLinks {
    /// Voter `i`'s `[registry.direct]` section.
    fn section(&self, i: u8) -> String {
        let peers: Vec<String> = (1..)
            .zip(&self.ports)
            .map(|(id, port)| format!("{id} = \"127.0.0.1:{port}\""))
            .collect();
        format!(
            "\n# The voters' Raft RPCs go voter to voter (lineage dev --raft-over-nats: through NATS).\n[registry.direct]\nlisten = \"127.0.0.1:{}\"\npeers = {{ {} }}\ntoken_file = {:?}\n",
            self.ports[usize::from(i) - 1],
            peers.join(", "),
            self.token_file.display().to_string()
        )
    }
}

/// The `acp-testagent` profile, `delegator` (the same agent with lineage's tools over MCP,
/// stdio), `delegator-http` (the same, declaring `mcpCapabilities.http`: its tools over
/// streamable HTTP, without a sandbox) and `acp-testagent-unsandboxed`, when the test agent is
/// built next to this binary; `echo` (a scripted agent) always.
fn testagent_profile() -> String {
    let agent = lineage_program()
        .ok()
        .map(|exe| exe.with_file_name("lineage-acp-testagent"))
        .filter(|p| p.is_file());
    match agent {
        Some(path) => format!(
            "\n[agents.acp-testagent]\ndriver = \"acp\"\ncommand = {path:?}\ndescription = \"deterministic ACP test agent\"\n\n[agents.delegator]\ndriver = \"acp\"\ncommand = {path:?}\ntools = true\ndescription = \"the ACP test agent with lineage's tools: prompt lines `tool: NAME {{json}}` call them\"\n\n[agents.delegator-http]\ndriver = \"acp\"\ncommand = {path:?}\nargs = [\"--mcp-http\"]\ntools = true\nisolation = \"none\"\ndescription = \"delegator, with its tools over streamable HTTP (no sandbox: an HTTP request cannot be bound to one)\"\n\n[agents.acp-testagent-unsandboxed]\ndriver = \"acp\"\ncommand = {path:?}\nisolation = \"none\"\ndescription = \"acp-testagent without a sandbox (lineage bench spawn compares the two)\"\n{ECHO_PROFILE}",
            path = path.display().to_string()
        ),
        None => ECHO_PROFILE.to_owned(),
    }
}
