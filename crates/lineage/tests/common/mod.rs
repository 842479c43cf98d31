//! End-to-end harness: a real nats-server and real `lineage node` processes (not threads).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lineage_testkit::{free_port, NatsServer};

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
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn lineage node");
        self.child = Some(child);
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
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
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
        write!(s, "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
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

/// A local cluster: nats-server plus N node processes, all registry voters.
pub struct Cluster {
    pub nats: NatsServer,
    pub dir: tempfile::TempDir,
    pub nodes: Vec<NodeProc>,
    pub cluster: String,
}

impl Cluster {
    /// Starts nats-server and `n` nodes (1, 3 or 5), and waits until every node is ready.
    pub fn start(n: usize) -> Cluster {
        let nats = NatsServer::start().expect("start nats-server");
        let dir = tempfile::Builder::new().prefix("lineage-e2e-").tempdir().expect("tempdir");
        let cluster = "e2e".to_owned();
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
                child: None,
            });
        }
        let url = nats.url();
        for node in &mut nodes {
            node.spawn(&url);
        }
        let c = Cluster { nats, dir, nodes, cluster };
        c.wait_ready(Duration::from_secs(60));
        c
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
                    panic!("{} not ready within {limit:?}; log:\n{}", node.id, node.log_text());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Restarts a stopped node with the same config and data dir.
    pub fn restart(&mut self, index: usize) {
        let url = self.nats.url();
        self.nodes[index].spawn(&url);
    }

    /// Runs the CLI against this cluster: (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out: Output = Command::new(lineage_bin())
            .args(["--nats", &self.nats.url(), "--cluster", &self.cluster])
            .args(args)
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
        assert_eq!(code, 0, "lineage {args:?} failed: {err}\n{out}\nlogs:\n{}", self.logs());
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
