//! [`Cluster`]: a local lineage cluster of real processes: a nats-server (or a 3-server
//! JetStream cluster, [`NatsCluster`]) and N `lineage node` processes ([`NodeProc`]), all
//! registry voters; secured with the shipped NATS users ([`Cluster::start_secured`]); worker
//! and client nodes added later. The CLI and the test's own bus connection are in
//! [`crate::cli`] and [`crate::bus`].

use std::path::Path;
use std::time::Duration;

use crate::bus::{precreate_streams, Bus};
use crate::node::{nats_user_env, voters_line, write_password_file, NodeConfig, NodeProc, Role};
use crate::shipped;
use crate::{free_port, wait_for, NatsCluster, NatsOptions, NatsServer};

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
    /// Runs the node processes as this uid (and the same gid) instead of the test's own user,
    /// which must be root (V2: a cluster run by an unprivileged user). The cluster's directory
    /// is then that user's.
    pub run_as: Option<u32>,
}

/// A local cluster: nats-server plus N node processes, all registry voters.
pub struct Cluster {
    /// The NATS side.
    pub nats: Nats,
    /// Holds the node configs, data dirs and logs.
    pub dir: tempfile::TempDir,
    /// The node processes, `node-1` first.
    pub nodes: Vec<NodeProc>,
    /// The cluster name (`e2e`, or `dev` when secured).
    pub cluster: String,
    pub(crate) bus: std::sync::OnceLock<Bus>,
    /// Set by [`Cluster::start_secured`]: the shipped NATS users' passwords.
    pub secured: Option<Secured>,
    /// Node index -> the NATS URL(s) it is started with instead of [`Nats::node_url`] (a
    /// proxy in front of NATS, [`Cluster::route`]).
    pub routes: std::collections::BTreeMap<usize, String>,
    /// The uid the node processes run as, when not the test's own ([`ClusterOptions::run_as`]).
    pub run_as: Option<u32>,
}

/// The NATS side of a cluster started by [`Cluster::start_secured`].
#[derive(Debug, Clone)]
pub struct Secured {
    /// The shipped users' passwords (nats-server config variables of the same names as the
    /// environment variables `config/nats-server.conf` references).
    pub passwords: shipped::Passwords,
    /// The harness's own user ([`TEST_ADMIN`], not a shipped user, no restrictions): the
    /// test-side connection that reads session logs and sends raw requests.
    pub admin_password: String,
}

/// The harness's own NATS user in a secured cluster.
pub const TEST_ADMIN: &str = "lineage-test-admin";

/// How long a start waits for every node's `/readyz`.
const READY_WITHIN: Duration = Duration::from_secs(60);

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
                env: owned(env),
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
        Cluster::start_on(nats, n, options, Default::default())
    }

    /// [`Cluster::start_opts`] on NATS already started (`options.nats_cluster` is not read),
    /// each node `i` in `routes` started with its URL there ([`Cluster::route`]: say proxies
    /// in front of the servers).
    pub fn start_on(
        nats: Nats,
        n: usize,
        options: ClusterOptions,
        routes: std::collections::BTreeMap<usize, String>,
    ) -> Cluster {
        let dir = tempdir("lineage-e2e-");
        let cluster = "e2e".to_owned();
        if let Some(replicas) = options.precreate_streams {
            precreate_streams(&nats.url_list(), &cluster, replicas);
        }
        if let Some(uid) = options.run_as {
            give_to(dir.path(), uid);
        }
        let mut c = Cluster {
            nats,
            dir,
            nodes: Vec::new(),
            cluster,
            bus: std::sync::OnceLock::new(),
            secured: None,
            routes,
            run_as: options.run_as,
        };
        c.add_voters(n, &options.env, &options.extra_toml);
        c
    }

    /// Starts `n` voters (node-1..n) of cluster `dev` against a nats-server whose authorization
    /// is the shipped `config/nats-server.conf` block (its users and permissions, verbatim),
    /// plus the harness's own [`TEST_ADMIN`] user. Each node connects as NATS user `voter`
    /// through `LINEAGE_NATS__USER` and `LINEAGE_NATS__PASSWORD_FILE`; [`Cluster::cli`] runs as
    /// `operator` (`NATS_USER`/`NATS_PASSWORD`), [`Cluster::cli_as`] as any shipped user.
    pub fn start_secured(n: usize) -> Cluster {
        Self::start_secured_with_toml(n, "")
    }

    /// [`Cluster::start_secured`] with `extra_toml` appended to every node's config (say
    /// `[agents.<name>]` profiles).
    pub fn start_secured_with_toml(n: usize, extra_toml: &str) -> Cluster {
        let passwords = shipped::Passwords::shipped();
        let admin_password = shipped::generate_password();
        let text = shipped::shipped_config();
        let users = shipped::users_of(shipped::authorization_block(&text));
        let dir = tempdir("lineage-e2e-secured-");
        let extra_config = format!(
            "log_file: {log:?}\n{vars}\nauthorization {{\n  users = [\n{users}\n    # the test harness's own connection, not a shipped user\n    {{ user: \"{TEST_ADMIN}\", password: \"{admin_password}\" }}\n  ]\n}}\n",
            vars = passwords.as_config_vars(),
            log = dir.path().join("nats-server.log").display().to_string(),
        );
        let nats = NatsServer::start_with(NatsOptions {
            extra_config,
            ..Default::default()
        })
        .expect("start nats-server with the shipped authorization");
        let voter_password = write_password_file(dir.path(), "voter", passwords.of("voter"));
        let mut c = Cluster {
            nats: Nats::One(nats),
            dir,
            nodes: Vec::new(),
            cluster: shipped::SHIPPED_CLUSTER.to_owned(),
            bus: std::sync::OnceLock::new(),
            secured: Some(Secured {
                passwords,
                admin_password,
            }),
            routes: Default::default(),
            run_as: None,
        };
        c.add_voters(n, &nats_user_env("voter", &voter_password), extra_toml);
        c
    }

    /// Writes the configs of voters node-1..n (node-1 bootstraps), starts them, waits until
    /// every node is ready.
    fn add_voters(&mut self, n: usize, env: &[(String, String)], extra_toml: &str) {
        let voters = voters_line(n);
        for i in 1..=n {
            let role = Role::Voter {
                raft_id: i,
                bootstrap: i == 1,
            };
            let node = self.new_node(&format!("node-{i}"), role, &voters, env, extra_toml);
            self.nodes.push(node);
        }
        for i in 0..self.nodes.len() {
            let url = self.node_url(i);
            self.nodes[i].spawn(&url);
        }
        self.wait_ready(READY_WITHIN);
    }

    /// A node `id` of this cluster (config written, not started), connecting to the URL node
    /// number `self.nodes.len()` is given.
    fn new_node(
        &self,
        id: &str,
        role: Role,
        voters: &str,
        env: &[(String, String)],
        extra_toml: &str,
    ) -> NodeProc {
        let http_port = free_port().expect("port");
        let config = self.dir.path().join(format!("{id}.toml"));
        let data_dir = self.dir.path().join(match &role {
            Role::Voter { raft_id, .. } => format!("data-{raft_id}"),
            Role::Client => format!("data-{id}"),
        });
        let text = NodeConfig {
            cluster: &self.cluster,
            nats_url: &self.node_url(self.nodes.len()),
            id,
            data_dir: &data_dir,
            http_port,
            role,
            voters,
        }
        .render();
        let text = if extra_toml.is_empty() {
            text
        } else {
            format!("{text}\n{extra_toml}")
        };
        std::fs::write(&config, text).expect("write node config");
        let log = self.dir.path().join(format!("{id}.log"));
        let mut node = NodeProc::new(id, config, http_port, log, env.to_vec());
        if let Some(uid) = self.run_as {
            std::fs::File::create(&node.log).expect("create the node's log");
            give_to(&node.log, uid);
            node.uid = Some(uid);
        }
        node
    }

    /// The `voters = ...` line of node-1's config.
    fn voters(&self) -> String {
        std::fs::read_to_string(&self.nodes[0].config)
            .expect("read node-1 config")
            .lines()
            .find(|l| l.starts_with("voters = "))
            .expect("node-1 config has voters")
            .to_owned()
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
        let index = self.add_client_node_env(id, nats_user_env(id, &password));
        self.wait_ready(READY_WITHIN);
        index
    }

    /// Adds a registry-client node (agent host) `id` with extra environment `env` and starts
    /// it, without waiting for it to be ready (it may be expected to refuse to start).
    pub fn add_client_node(&mut self, id: &str, env: &[(&str, &str)]) -> usize {
        self.add_client_node_env(id, owned(env))
    }

    fn add_client_node_env(&mut self, id: &str, env: Vec<(String, String)>) -> usize {
        let node = self.new_node(id, Role::Client, &self.voters(), &env, "");
        let index = self.nodes.len();
        self.nodes.push(node);
        self.restart(index);
        index
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

    /// Waits until every running node answers 200 on /readyz.
    pub fn wait_ready(&self, limit: Duration) {
        for node in self.nodes.iter().filter(|n| n.is_started()) {
            wait_for(limit, format!("{} to be ready", node.id), || {
                match node.http_get("/readyz") {
                    Some((200, _)) => Ok(()),
                    seen => Err(NodeSeen(node, seen)),
                }
            });
        }
    }

    /// Restarts a stopped node with the same config and data dir.
    pub fn restart(&mut self, index: usize) {
        let url = self.node_url(index);
        self.nodes[index].spawn(&url);
    }

    /// From now on node `index` (it may not exist yet: the next one added) is started with
    /// `url` as its NATS URL(s), say proxies in front of the servers; a running node takes it
    /// at its next (re)start.
    pub fn route(&mut self, index: usize, url: String) {
        self.routes.insert(index, url);
    }

    /// The NATS URL(s) node `index` is started with: its [`Cluster::route`], or
    /// [`Nats::node_url`].
    pub fn node_url(&self, index: usize) -> String {
        self.routes
            .get(&index)
            .cloned()
            .unwrap_or_else(|| self.nats.node_url(index))
    }

    /// Stops node `index` as Kubernetes does in a rolling upgrade: SIGTERM (by pid), then waits
    /// up to `within` for it to exit on its own. Returns its exit code and how long it took;
    /// panics (with its log) when it is still running after `within`.
    pub fn graceful_stop(&mut self, index: usize, within: Duration) -> (i32, Duration) {
        let started = std::time::Instant::now();
        self.nodes[index].sigterm();
        let code = self.wait_stopped(index, within);
        (code, started.elapsed())
    }

    /// Waits up to `within` for node `index` (sent SIGTERM by [`NodeProc::sigterm`]) to exit;
    /// its exit code. Panics (with its log) when it is still running after `within`.
    pub fn wait_stopped(&mut self, index: usize, within: Duration) -> i32 {
        match self.nodes[index].wait_exit(within) {
            Some(code) => code,
            None => panic!(
                "{} did not exit within {within:?} of SIGTERM; log:\n{}",
                self.nodes[index].id,
                tail(&self.nodes[index].log_text(), 80)
            ),
        }
    }

    /// One step of a rolling restart: [`Cluster::graceful_stop`], start the node again on its
    /// data dir, and wait until every node is ready. Returns what the stop returned.
    pub fn graceful_restart(&mut self, index: usize, within: Duration) -> (i32, Duration) {
        let stopped = self.graceful_stop(index, within);
        self.restart(index);
        self.wait_ready(READY_WITHIN);
        stopped
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

/// A node's `/readyz` answer and its log, for the timeout message of [`Cluster::wait_ready`].
struct NodeSeen<'a>(&'a NodeProc, Option<(u16, String)>);

impl std::fmt::Display for NodeSeen<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/readyz {:?}; log:\n{}", self.1, self.0.log_text())
    }
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn owned(env: &[(&str, &str)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn tempdir(prefix: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("tempdir");
    // Searchable (not listable) by other users: a node whose sandboxes run as uids of their
    // own (agents.sandbox_uids) needs its data_dir reachable by them.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    dir
}

/// Makes `path` user `uid`'s (and group `uid`'s), readable by others: the directory of a
/// cluster whose nodes run as `uid`.
fn give_to(path: &std::path::Path, uid: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap_or_else(|e| {
        panic!(
            "chown {} to {uid} (the test must run as root): {e}",
            path.display()
        )
    });
    if path.is_dir() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}
