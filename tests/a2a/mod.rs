//! What the A2A suites share (issue 38): `lineage a2a` as a child process, and the official
//! Python `a2a-sdk` client (`tests/a2a/client.py`) run once per operation.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use lineage_testkit::binary::lineage_bin;
use lineage_testkit::free_port;
use lineage_testkit::prelude::Cluster;
use serde_json::Value;

/// The gateways' bearer token.
pub const TOKEN: &str = "a2a-test-token-0123456789";

/// `lineage a2a`, killed on drop.
pub struct Gateway {
    child: Child,
    /// Its port.
    pub port: u16,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    /// On a free port.
    pub fn start(c: &Cluster) -> Gateway {
        Gateway::start_on(c, free_port().expect("a free port"))
    }

    /// On `port`, once it serves (its first line printed).
    pub fn start_on(c: &Cluster, port: u16) -> Gateway {
        Gateway::start_with(c, port, &[])
    }

    /// On `port` with more arguments of `lineage a2a`.
    pub fn start_with(c: &Cluster, port: u16, extra: &[&str]) -> Gateway {
        let mut child = Command::new(lineage_bin())
            .args(["--nats", &c.nats.url(), "--cluster", &c.cluster])
            .args(["a2a", "--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env("LINEAGE_A2A_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start lineage a2a");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.starts_with("lineage a2a: "), "{first}");
        assert!(
            !first.contains(TOKEN),
            "the token is never printed: {first}"
        );
        Gateway { child, port }
    }

    /// The base URL of `agent`.
    pub fn url(&self, agent: &str) -> String {
        format!("http://127.0.0.1:{}/agents/{agent}", self.port)
    }
}

pub fn python_a2a_installed() {
    let ok = Command::new("python3")
        .args(["-c", "import a2a.client"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the Python a2a-sdk is missing: run scripts/install-deps.sh (pip install a2a-sdk)"
    );
}

pub fn client() -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a/client.py"));
    cmd
}

/// Runs the client; its JSON lines and exit code.
pub fn run(args: &[&str]) -> (i32, Vec<Value>) {
    let out = client()
        .args(args)
        .output()
        .expect("run tests/a2a/client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{e}: {l}\n{}", String::from_utf8_lossy(&out.stderr)))
        })
        .collect();
    (out.status.code().unwrap_or(-1), lines)
}

/// The one result of an operation that must succeed.
pub fn ok(args: &[&str]) -> Value {
    let (code, lines) = run(args);
    assert_eq!(code, 0, "{args:?}: {lines:?}");
    lines
        .last()
        .cloned()
        .unwrap_or_else(|| panic!("{args:?}: no output"))
}

/// The error line of an operation that must fail.
pub fn refused(args: &[&str]) -> String {
    let (code, lines) = run(args);
    assert_eq!(code, 3, "{args:?} should fail: {lines:?}");
    lines[0]["error"].as_str().unwrap_or_default().to_owned()
}

/// The task of a blocking send's reply.
pub fn sent_task(v: &Value) -> &Value {
    &v["event"]["task"]
}

pub fn replies(task: &Value) -> Vec<String> {
    task["artifacts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    x["parts"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}
