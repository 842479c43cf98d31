//! End-to-end harness: a real nats-server (or a 3-server JetStream cluster) and real
//! `lineage node` processes (not threads).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lineage_testkit::cluster::NatsCluster;
use lineage_testkit::{free_port, NatsServer};

pub mod shipped_nats;

/// The `lineage` binary under test.
pub fn lineage_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lineage"))
}

/// One `lineage node` process.
pub struct NodeProc {
    pub id: String,
    pub config: PathBuf,
    pub http_port: u16,
    pub log: PathBuf,
    /// Extra environment for the process (e.g. `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub env: Vec<(String, String)>,
    child: Option<Child>,
}

impl NodeProc {
    fn spawn(&mut self, nats_url: &str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open node log");
        let child = Command::new(lineage_bin())
            .args(["--nats", nats_url, "node", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "info,lineage=debug,openraft=warn")
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn lineage node");
        self.child = Some(child);
    }

    /// Waits up to `limit` for the process to exit: its exit code (`None`: still running).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status.code().unwrap_or(-1));
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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

    /// SIGTERM, then wait up to 10 s, then SIGKILL.
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// GET a path on the node's HTTP port: (status code, body).
    pub fn http_get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.http_port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        // One write: the request head in one segment.
        let request =
            format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Some((code, body))
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

/// The NATS side of a [`Cluster`]: one nats-server (the default) or three routed into one
/// JetStream cluster ([`ClusterOptions::nats_cluster`]).
pub enum Nats {
    /// One server.
    One(NatsServer),
    /// A 3-server JetStream cluster; node `i` connects to server `i % 3`.
    Three(NatsCluster),
}

impl Nats {
    /// The URL the CLI and the test's own connection use: the server's, or the first cluster
    /// member not killed.
    pub fn url(&self) -> String {
        match self {
            Nats::One(server) => server.url(),
            Nats::Three(cluster) => cluster.live_url(),
        }
    }

    /// Every server's URL.
    pub fn url_list(&self) -> Vec<String> {
        match self {
            Nats::One(server) => vec![server.url()],
            Nats::Three(cluster) => cluster.url_list(),
        }
    }

    /// The `nats_url` node `index` (0-based) is given: the one server's URL, or every cluster
    /// member's, comma-separated, its own member (`index % 3`) first.
    pub fn node_url(&self, index: usize) -> String {
        match self {
            Nats::One(server) => server.url(),
            Nats::Three(cluster) => {
                let own = index % cluster.len();
                let mut urls = cluster.url_list();
                urls.rotate_left(own);
                urls.join(",")
            }
        }
    }

    /// The one server (panics for a cluster).
    pub fn server(&mut self) -> &mut NatsServer {
        match self {
            Nats::One(server) => server,
            Nats::Three(_) => panic!("this Cluster runs a 3-server NATS cluster; use cluster()"),
        }
    }

    /// The 3-server cluster (panics for one server).
    pub fn cluster(&mut self) -> &mut NatsCluster {
        match self {
            Nats::Three(cluster) => cluster,
            Nats::One(_) => panic!("this Cluster runs one nats-server; use server()"),
        }
    }

    /// Restarts the one server (SIGKILL, same port and store); see [`NatsServer::restart`].
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.server().restart()
    }
}

/// How [`Cluster::start_opts`] sets a cluster up beyond the node count.
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// Extra environment variables for every node process.
    pub env: Vec<(String, String)>,
    /// Three nats-servers (routes, clustered JetStream) instead of one.
    pub nats_cluster: bool,
    /// Create the events and inbox streams with this many replicas before any node starts
    /// (`None`: the nodes create them as configured).
    pub precreate_streams: Option<usize>,
    /// Appended to every node's config file (say `[agents.<name>]` profiles).
    pub extra_toml: String,
}

/// A local cluster: nats-server plus N node processes, all registry voters.
pub struct Cluster {
    pub nats: Nats,
    pub dir: tempfile::TempDir,
    pub nodes: Vec<NodeProc>,
    pub cluster: String,
    bus: std::sync::OnceLock<Bus>,
    /// Set by [`Cluster::start_secured`]: the shipped NATS users' passwords.
    pub secured: Option<Secured>,
}

/// The NATS side of a cluster started by [`Cluster::start_secured`].
#[derive(Debug, Clone)]
pub struct Secured {
    /// The shipped users' passwords (nats-server config variables of the same names as the
    /// environment variables `config/nats-server.conf` references).
    pub passwords: shipped_nats::Passwords,
    /// The harness's own user (`lineage-test-admin`, not a shipped user, no restrictions): the
    /// test-side connection that reads session logs and sends raw requests.
    pub admin_password: String,
}

/// The harness's own NATS user in a secured cluster.
pub const TEST_ADMIN: &str = "lineage-test-admin";

impl Cluster {
    /// Starts nats-server and `n` nodes (1, 3 or 5), and waits until every node is ready.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with_env(n, &[])
    }

    /// [`Cluster::start`] with extra environment variables for every node process.
    pub fn start_with_env(n: usize, env: &[(&str, &str)]) -> Cluster {
        Cluster::start_with_toml(n, env, "")
    }

    /// [`Cluster::start_with_env`] with `extra_toml` appended to every node's config file (say
    /// `[agents.<name>]` profiles).
    pub fn start_with_toml(n: usize, env: &[(&str, &str)], extra_toml: &str) -> Cluster {
        Cluster::start_opts(
            n,
            ClusterOptions {
                env: env
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                extra_toml: extra_toml.to_owned(),
                ..ClusterOptions::default()
            },
        )
    }

    /// [`Cluster::start`] with [`ClusterOptions`].
    pub fn start_opts(n: usize, options: ClusterOptions) -> Cluster {
        let nats = if options.nats_cluster {
            Nats::Three(NatsCluster::start().expect("start a 3-server NATS cluster"))
        } else {
            Nats::One(NatsServer::start().expect("start nats-server"))
        };
        let dir = tempfile::Builder::new()
            .prefix("lineage-e2e-")
            .tempdir()
            .expect("tempdir");
        let cluster = "e2e".to_owned();
        if let Some(replicas) = options.precreate_streams {
            precreate_streams(&nats.url_list(), &cluster, replicas);
        }
        let voters: Vec<String> = (1..=n).map(|i| format!("{i} = \"node-{i}\"")).collect();
        let mut nodes = Vec::new();
        for i in 1..=n {
            let http_port = free_port().expect("port");
            let config = dir.path().join(format!("node-{i}.toml"));
            let text = format!(
                "cluster = \"{cluster}\"\nnats_url = \"{url}\"\n\n[node]\nid = \"node-{i}\"\ndata_dir = \"{data}\"\nhttp_addr = \"127.0.0.1:{http_port}\"\n\n[registry]\nrole = \"voter\"\nraft_id = {i}\nbootstrap = {boot}\nvoters = {{ {voters} }}\nheartbeat_ms = 50\nelection_min_ms = 300\nelection_max_ms = 600\n\n[lease]\nlease_ms = 2000\nheartbeat_ms = 250\n",
                url = nats.node_url(i - 1),
                data = dir.path().join(format!("data-{i}")).display(),
                boot = i == 1,
                voters = voters.join(", "),
            );
            std::fs::write(&config, format!("{text}\n{}", options.extra_toml))
                .expect("write config");
            nodes.push(NodeProc {
                id: format!("node-{i}"),
                config,
                http_port,
                log: dir.path().join(format!("node-{i}.log")),
                env: options.env.clone(),
                child: None,
            });
        }
        for (i, node) in nodes.iter_mut().enumerate() {
            node.spawn(&nats.node_url(i));
        }
        let c = Cluster {
            nats,
            dir,
            nodes,
            cluster,
            bus: std::sync::OnceLock::new(),
            secured: None,
        };
        c.wait_ready(Duration::from_secs(60));
        c
    }

    /// Starts `n` voters (node-1..n) of cluster `dev` against a nats-server whose authorization
    /// is the shipped `config/nats-server.conf` block (its users and permissions, verbatim),
    /// plus the harness's own [`TEST_ADMIN`] user. Each node connects as NATS user `voter`
    /// through `LINEAGE_NATS__USER` and `LINEAGE_NATS__PASSWORD_FILE`; [`Cluster::cli`] runs as
    /// `operator` (`NATS_USER`/`NATS_PASSWORD`), [`Cluster::cli_as`] as any shipped user.
    pub fn start_secured(n: usize) -> Cluster {
        let passwords = shipped_nats::Passwords::shipped();
        let admin_password = shipped_nats::generate_password();
        let text = shipped_nats::shipped_config();
        let users = shipped_nats::users_of(shipped_nats::authorization_block(&text));
        let dir = tempfile::Builder::new()
            .prefix("lineage-e2e-secured-")
            .tempdir()
            .expect("tempdir");
        let extra_config = format!(
            "log_file: {log:?}\n{vars}\nauthorization {{\n  users = [\n{users}\n    # the test harness's own connection, not a shipped user\n    {{ user: \"{TEST_ADMIN}\", password: \"{admin_password}\" }}\n  ]\n}}\n",
            vars = passwords.as_config_vars(),
            log = dir.path().join("nats-server.log").display().to_string(),
        );
        let nats = NatsServer::start_with(lineage_testkit::NatsOptions {
            extra_config,
            ..Default::default()
        })
        .expect("start nats-server with the shipped authorization");
        let cluster = shipped_nats::SHIPPED_CLUSTER.to_owned();
        let voter_password = write_password_file(dir.path(), "voter", passwords.of("voter"));
        let voters: Vec<String> = (1..=n).map(|i| format!("{i} = \"node-{i}\"")).collect();
        let mut nodes = Vec::new();
        for i in 1..=n {
            let http_port = free_port().expect("port");
            let config = dir.path().join(format!("node-{i}.toml"));
            let text = format!(
                "cluster = \"{cluster}\"\nnats_url = \"{url}\"\n\n[node]\nid = \"node-{i}\"\ndata_dir = \"{data}\"\nhttp_addr = \"127.0.0.1:{http_port}\"\n\n[registry]\nrole = \"voter\"\nraft_id = {i}\nbootstrap = {boot}\nvoters = {{ {voters} }}\nheartbeat_ms = 50\nelection_min_ms = 300\nelection_max_ms = 600\n\n[lease]\nlease_ms = 2000\nheartbeat_ms = 250\n",
                url = nats.url(),
                data = dir.path().join(format!("data-{i}")).display(),
                boot = i == 1,
                voters = voters.join(", "),
            );
            std::fs::write(&config, text).expect("write config");
            nodes.push(NodeProc {
                id: format!("node-{i}"),
                config,
                http_port,
                log: dir.path().join(format!("node-{i}.log")),
                env: nats_user_env("voter", &voter_password),
                child: None,
            });
        }
        let url = nats.url();
        for node in &mut nodes {
            node.spawn(&url);
        }
        let c = Cluster {
            nats: Nats::One(nats),
            dir,
            nodes,
            cluster,
            bus: std::sync::OnceLock::new(),
            secured: Some(Secured {
                passwords,
                admin_password,
            }),
        };
        c.wait_ready(Duration::from_secs(60));
        c
    }

    /// Adds and starts a worker node (registry client, agent host) named `id` that connects as
    /// the shipped NATS user of the same name (`node-4`), and waits until it is ready. Secured
    /// clusters only.
    pub fn add_worker(&mut self, id: &str) -> usize {
        let secured = self
            .secured
            .as_ref()
            .expect("add_worker needs a cluster from start_secured");
        let password = write_password_file(self.dir.path(), id, secured.passwords.of(id));
        // The voters line of the first voter's config.
        let voters = std::fs::read_to_string(&self.nodes[0].config)
            .expect("read node-1 config")
            .lines()
            .find(|l| l.starts_with("voters = "))
            .expect("node-1 config has voters")
            .to_owned();
        let http_port = free_port().expect("port");
        let config = self.dir.path().join(format!("{id}.toml"));
        let text = format!(
            "cluster = \"{cluster}\"\nnats_url = \"{url}\"\n\n[node]\nid = \"{id}\"\ndata_dir = \"{data}\"\nhttp_addr = \"127.0.0.1:{http_port}\"\n\n[registry]\nrole = \"client\"\nbootstrap = false\n{voters}\n\n[lease]\nlease_ms = 2000\nheartbeat_ms = 250\n",
            cluster = self.cluster,
            url = self.nats.url(),
            data = self.dir.path().join(format!("data-{id}")).display(),
        );
        std::fs::write(&config, text).expect("write worker config");
        let mut node = NodeProc {
            id: id.to_owned(),
            config,
            http_port,
            log: self.dir.path().join(format!("{id}.log")),
            env: nats_user_env(id, &password),
            child: None,
        };
        node.spawn(&self.nats.url());
        self.nodes.push(node);
        self.wait_ready(Duration::from_secs(60));
        self.nodes.len() - 1
    }

    /// The nats-server log of a secured cluster (permission violations are `[ERR]` lines).
    pub fn nats_server_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats-server.log")).unwrap_or_default()
    }

    /// The permission violations in a secured cluster's nats-server log, one line each.
    pub fn permission_violations(&self) -> Vec<String> {
        self.nats_server_log()
            .lines()
            .filter(|l| l.contains("Violation"))
            .map(str::to_owned)
            .collect()
    }

    /// The password of shipped NATS user `user` in a secured cluster.
    pub fn nats_password(&self, user: &str) -> String {
        self.secured
            .as_ref()
            .expect("a secured cluster")
            .passwords
            .of(user)
            .to_owned()
    }

    /// [`Cluster::cli`] as shipped NATS user `user` (`NATS_USER`/`NATS_PASSWORD`, the natscli
    /// names the CLI reads).
    pub fn cli_as(&self, user: &str, args: &[&str]) -> (i32, String, String) {
        let password = self.nats_password(user);
        self.cli_env(&[("NATS_USER", user), ("NATS_PASSWORD", &password)], args)
    }

    /// Adds a registry-client node (agent host) `id` with extra environment `env` and starts
    /// it, without waiting for it to be ready (it may be expected to refuse to start).
    pub fn add_client_node(&mut self, id: &str, env: &[(&str, &str)]) -> usize {
        let voters = std::fs::read_to_string(&self.nodes[0].config)
            .expect("read node-1 config")
            .lines()
            .find(|l| l.starts_with("voters = "))
            .expect("node-1 config has voters")
            .to_owned();
        let index = self.nodes.len();
        let url = self.nats.node_url(index);
        let http_port = free_port().expect("port");
        let config = self.dir.path().join(format!("{id}.toml"));
        let text = format!(
            "cluster = \"{cluster}\"\nnats_url = \"{url}\"\n\n[node]\nid = \"{id}\"\ndata_dir = \"{data}\"\nhttp_addr = \"127.0.0.1:{http_port}\"\n\n[registry]\nrole = \"client\"\nbootstrap = false\n{voters}\n\n[lease]\nlease_ms = 2000\nheartbeat_ms = 250\n",
            cluster = self.cluster,
            data = self.dir.path().join(format!("data-{id}")).display(),
        );
        std::fs::write(&config, text).expect("write node config");
        let mut node = NodeProc {
            id: id.to_owned(),
            config,
            http_port,
            log: self.dir.path().join(format!("{id}.log")),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            child: None,
        };
        node.spawn(&url);
        self.nodes.push(node);
        index
    }

    /// Waits until every running node answers 200 on /readyz.
    pub fn wait_ready(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            loop {
                if let Some((200, _)) = node.http_get("/readyz") {
                    break;
                }
                if Instant::now() > deadline {
                    panic!(
                        "{} not ready within {limit:?}; log:\n{}",
                        node.id,
                        node.log_text()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Restarts a stopped node with the same config and data dir.
    pub fn restart(&mut self, index: usize) {
        let url = self.nats.node_url(index);
        self.nodes[index].spawn(&url);
    }

    /// Runs the CLI against this cluster: (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        self.cli_env(&[], args)
    }

    /// [`Cluster::cli`] with extra environment variables (e.g. `TRACEPARENT`).
    pub fn cli_env(&self, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
        // A secured cluster's CLI runs as `operator` unless `env` says otherwise.
        let operator: Vec<(String, String)> = match &self.secured {
            Some(s) => vec![
                ("NATS_USER".into(), "operator".into()),
                (
                    "NATS_PASSWORD".into(),
                    s.passwords.of("operator").to_owned(),
                ),
            ],
            None => Vec::new(),
        };
        let out: Output = Command::new(lineage_bin())
            .args(["--nats", &self.nats.url(), "--cluster", &self.cluster])
            .args(args)
            .envs(operator.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied())
            .output()
            .expect("run lineage");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs the CLI with `--json` and parses stdout; panics with stderr when it failed.
    pub fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let (code, out, err) = self.cli(&all);
        assert_eq!(
            code,
            0,
            "lineage {args:?} failed: {err}\n{out}\nlogs:\n{}",
            self.logs()
        );
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    /// Every node's log, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- {} ---\n{}", n.id, tail(&n.log_text(), 60)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The data dir root.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Polls `f` every 100 ms until it returns `Some`, or panics after `limit` with `what`.
pub fn eventually<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A test-side NATS connection (its own tokio runtime): reads session logs from JetStream,
/// sends raw control requests, subscribes to subjects. Independent of the code under test.
pub struct Bus {
    pub rt: tokio::runtime::Runtime,
    pub client: async_nats::Client,
}

/// One event of a session log (`lineage.<cluster>.session.<id>.events`).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Event {
    pub seq: u64,
    pub kind: String,
    pub data: serde_json::Value,
    #[serde(default)]
    pub at_ms: u64,
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

impl Bus {
    /// The test's own connection as `user` with `password`.
    pub fn connect_as(url: &str, user: &str, password: &str) -> Bus {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("test runtime");
        let client = rt
            .block_on(
                async_nats::ConnectOptions::new()
                    .user_and_password(user.to_owned(), password.to_owned())
                    .connect(url),
            )
            .expect("test NATS connection");
        Bus { rt, client }
    }

    /// Connects to any of `urls` (and fails over between them).
    fn connect(urls: &[String]) -> Bus {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("test runtime");
        let addrs: Vec<async_nats::ServerAddr> = urls
            .iter()
            .map(|u| u.parse().expect("a NATS URL"))
            .collect();
        let client = rt
            .block_on(async_nats::connect(addrs))
            .expect("test NATS connection");
        Bus { rt, client }
    }
}

/// Creates the events and inbox streams of `cluster` with `replicas` replicas, as a node
/// configured with `nats.stream_replicas = replicas` would.
fn precreate_streams(urls: &[String], cluster: &str, replicas: usize) {
    let bus = Bus::connect(urls);
    let subjects = lineage_bus::Subjects::new(cluster).expect("cluster name");
    let options = lineage_bus::StreamOptions {
        replicas,
        update: false,
    };
    bus.rt.block_on(async {
        lineage_bus::events::EventLogStore::open_with(
            bus.client.clone(),
            subjects.clone(),
            options,
        )
        .await
        .expect("create the events stream");
        lineage_bus::inbox::ParentInbox::open_with(bus.client.clone(), subjects, options)
            .await
            .expect("create the inbox stream");
    });
}

impl Cluster {
    /// The test's own NATS connection (made on first use).
    pub fn bus(&self) -> &Bus {
        self.bus.get_or_init(|| match &self.secured {
            None => Bus::connect(&self.nats.url_list()),
            Some(s) => Bus::connect_as(&self.nats.url(), TEST_ADMIN, &s.admin_password),
        })
    }

    /// `LINEAGE_<CLUSTER>_EVENTS`.
    pub fn events_stream(&self) -> String {
        format!("LINEAGE_{}_EVENTS", self.cluster.to_ascii_uppercase())
    }

    /// Reads a session's whole event log straight from JetStream (ordered consumer).
    pub fn log(&self, session: &str) -> Vec<Event> {
        use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
        use futures::StreamExt;
        let bus = self.bus();
        let subject = format!("lineage.{}.session.{session}.events", self.cluster);
        let stream_name = self.events_stream();
        bus.rt.block_on(async {
            let js = async_nats::jetstream::new(bus.client.clone());
            let stream = js.get_stream(&stream_name).await.expect("events stream");
            let mut consumer = stream
                .create_consumer(OrderedConfig {
                    filter_subject: subject.clone(),
                    deliver_policy: DeliverPolicy::All,
                    ..Default::default()
                })
                .await
                .expect("ordered consumer");
            let pending = consumer.info().await.expect("consumer info").num_pending;
            let mut events = Vec::new();
            if pending == 0 {
                return events;
            }
            let mut messages = consumer.messages().await.expect("messages");
            let mut read = 0u64;
            while read < pending {
                let next = tokio::time::timeout(Duration::from_secs(5), messages.next())
                    .await
                    .unwrap_or_else(|_| panic!("reading {subject} timed out"));
                let Some(msg) = next else { break };
                let msg = msg.expect("log message");
                read += 1;
                // One event (an object) or a batch appended together (an array).
                let value: serde_json::Value = serde_json::from_slice(&msg.payload)
                    .unwrap_or_else(|e| panic!("log message of {session} is not JSON: {e}"));
                let batch = match value {
                    serde_json::Value::Array(items) => items,
                    one => vec![one],
                };
                for item in batch {
                    let event: Event = serde_json::from_value(item)
                        .unwrap_or_else(|e| panic!("log event of {session} is malformed: {e}"));
                    events.push(event);
                }
                if msg.info().map(|i| i.pending == 0).unwrap_or(false) {
                    break;
                }
            }
            events
        })
    }

    /// A raw NATS request (what `nats req` would send); the reply parsed as JSON.
    pub fn request(&self, subject: &str, body: &[u8]) -> serde_json::Value {
        let bus = self.bus();
        let reply = bus.rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(20),
                bus.client.request(subject.to_owned(), body.to_vec().into()),
            )
            .await
            .unwrap_or_else(|_| panic!("no reply on {subject} within 20 s"))
            .unwrap_or_else(|e| panic!("request on {subject} failed: {e}"))
        });
        serde_json::from_slice(&reply.payload).unwrap_or_else(|e| {
            panic!(
                "reply on {subject} is not JSON ({e}): {}",
                String::from_utf8_lossy(&reply.payload)
            )
        })
    }

    /// A raw request to the cluster-wide control op `lineage.<cluster>.ctl.<op>`.
    pub fn ctl(&self, op: &str, body: &[u8]) -> serde_json::Value {
        self.request(&format!("lineage.{}.ctl.{op}", self.cluster), body)
    }

    /// A raw request to one node's control op `lineage.<cluster>.node.<node>.<op>`.
    pub fn node_ctl(&self, node: &str, op: &str, body: &[u8]) -> serde_json::Value {
        self.request(&format!("lineage.{}.node.{node}.{op}", self.cluster), body)
    }

    /// `lineage --json spawn ARGS` -> the reply object.
    pub fn spawn(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["spawn"];
        all.extend_from_slice(args);
        self.cli_json(&all)
    }

    /// `lineage spawn` of a top-level session on `node` running `script`; returns its id.
    pub fn spawn_root(&self, node: &str, script: &serde_json::Value) -> String {
        let text = script.to_string();
        let reply = self.spawn(&["--node", node, "--prompt", "go", "--script", &text]);
        id_of(&reply["session"])
    }

    /// `lineage --json tree ROOT` -> one object per session.
    pub fn tree(&self, root: &str) -> Vec<serde_json::Value> {
        match self.cli_json(&["tree", root]) {
            serde_json::Value::Array(items) => items,
            other => panic!("tree --json is not an array: {other}"),
        }
    }

    /// The tree row of `session` under `root`.
    pub fn row(&self, root: &str, session: &str) -> serde_json::Value {
        self.tree(root)
            .into_iter()
            .find(|r| r["session"] == session)
            .unwrap_or_else(|| panic!("{session} is not in the tree of {root}"))
    }

    /// Polls the tree of `root` until `session` is in `state`.
    pub fn wait_state(&self, root: &str, session: &str, state: &str, limit: Duration) {
        eventually(limit, &format!("{session} to be {state}"), || {
            let items = self.tree(root);
            let row = items.iter().find(|r| r["session"] == session)?;
            (row["state"] == state).then_some(())
        });
    }

    /// Direct children of `parent` in a tree listing, in registration order.
    pub fn children(tree: &[serde_json::Value], parent: &str) -> Vec<String> {
        let mut kids: Vec<&serde_json::Value> =
            tree.iter().filter(|r| r["parent"] == parent).collect();
        kids.sort_by_key(|r| {
            (
                r["created_at_ms"].as_u64(),
                r["session"].as_str().map(str::to_owned),
            )
        });
        kids.iter().map(|r| id_of(&r["session"])).collect()
    }

    /// Polls `session`'s log until `pred` holds; returns that log.
    pub fn wait_log(
        &self,
        session: &str,
        limit: Duration,
        what: &str,
        pred: impl Fn(&[Event]) -> bool,
    ) -> Vec<Event> {
        let deadline = Instant::now() + limit;
        loop {
            let log = self.log(session);
            if pred(&log) {
                return log;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {limit:?} waiting for {what} in the log of {session}; log:\n{}\nnode logs:\n{}",
                    render_log(&log),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

/// A JSON string value as an owned id.
pub fn id_of(v: &serde_json::Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string id, got {v}"))
        .to_owned()
}

/// A log as one line per event, for failure messages.
pub fn render_log(log: &[Event]) -> String {
    log.iter()
        .map(|e| format!("  {:>3} {:<24} {}", e.seq, e.kind, e.data))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Events of one kind.
pub fn of_kind<'a>(log: &'a [Event], kind: &str) -> Vec<&'a Event> {
    log.iter().filter(|e| e.kind == kind).collect()
}

/// `inbox/accepted` events whose message is of `kind` (`subagent-report`, `subagent-settled`,
/// `user`) and, when given, from `sender`.
pub fn accepted<'a>(log: &'a [Event], kind: &str, sender: Option<&str>) -> Vec<&'a Event> {
    log.iter()
        .filter(|e| e.kind == "inbox/accepted")
        .filter(|e| e.data["message"]["kind"] == kind)
        .filter(|e| sender.is_none_or(|s| e.data["message"]["sender_session_id"] == s))
        .collect()
}

/// `turn/start` events whose inputs include log sequence `seq`.
pub fn turns_consuming(log: &[Event], seq: u64) -> Vec<&Event> {
    log.iter()
        .filter(|e| e.kind == "turn/start")
        .filter(|e| {
            e.data["inputs"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v.as_u64() == Some(seq)))
        })
        .collect()
}

/// A scripted agent spec (`{"driver":"script","script":...}`).
pub fn agent(script: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"driver": "script", "script": script})
}

/// A spawn step.
pub fn spawn_step(
    shape: &str,
    node: &str,
    prompt: &str,
    script: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"do": "spawn", "shape": shape, "node": node, "prompt": prompt,
        "agent": agent(script)})
}
