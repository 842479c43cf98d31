//! The real harnesses' fixture (issue 32), shared by the suites that run them
//! (`c4_real_harnesses.rs`, `c1_harness_workspaces.rs`): the adapters' bin directory, the
//! scripted model endpoint (`model_server.py`), the harnesses' node profiles and a three-node
//! cluster hosting them. Included with `#[path]`; a suite uses what it needs.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lineage_testkit::prelude::{id_of, Cluster, Event};
use serde_json::{json, Value};

/// The harnesses: profile name, binary under `tools/harnesses/node_modules/.bin`, arguments.
pub const HARNESSES: [(&str, &str, &[&str]); 3] = [
    ("claude", "claude-agent-acp", &[]),
    ("codex", "codex-acp", &[]),
    ("gemini", "gemini", &["--acp"]),
];

/// The delegation statement's opening words (C1), as the child's model must see them.
pub const STATEMENT: &str = "You are a delegated subagent";

/// The repository (the e2e suites' package is its root).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The harnesses' bin directory; `None` (with one line) when npm is missing here.
pub fn harness_bins() -> Option<PathBuf> {
    let bin = repo().join("tools/harnesses/node_modules/.bin");
    if HARNESSES.iter().all(|(_, b, _)| bin.join(b).exists()) {
        return Some(bin);
    }
    let npm = Command::new("npm").arg("--version").output();
    if npm.is_err() {
        eprintln!("c4_real_harnesses: skipped: npm is missing, so the ACP adapters cannot be installed (install Node.js and run scripts/install-deps.sh)");
        return None;
    }
    panic!(
        "the ACP adapters are not installed in {}; run scripts/install-deps.sh (npm ci --prefix tools/harnesses)",
        bin.display()
    );
}

/// The scripted model endpoint, killed on drop.
pub struct Model {
    pub child: Child,
    pub port: u16,
    pub record: PathBuf,
}

impl Model {
    pub fn start(dir: &Path, rules: &Value) -> Model {
        let script = dir.join("script.json");
        std::fs::write(&script, json!({ "rules": rules }).to_string()).unwrap();
        let record = dir.join("record.jsonl");
        let mut child = Command::new("python3")
            .arg(repo().join("tests/harness/model_server.py"))
            .args(["--port", "0", "--script"])
            .arg(&script)
            .arg("--record")
            .arg(&record)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the model server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("model server said {line:?}"));
        Model {
            child,
            port,
            record,
        }
    }

    /// Every request so far (one JSON object each).
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The turn requests whose latest user message contains `marker`.
    pub fn turns_of(&self, marker: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["kind"] == "turn" && text(&r["last_user"]).contains(marker))
            .collect()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// The profiles of every harness (and `<name>-stdio`, the same with its tools over the stdio
/// bridge; `claude-edit` and `codex-edit`, editing files without asking when delegated), each with its
/// own home under `dir`, its model at `port`.
pub fn profiles(bins: &Path, dir: &Path, port: u16) -> String {
    let url = format!("http://127.0.0.1:{port}");
    let mut toml = String::from("[agents.echo]\ndriver = \"script\"\n\n");
    for (name, bin, args) in HARNESSES {
        let home = dir.join(format!("home-{name}"));
        std::fs::create_dir_all(&home).unwrap();
        let env = match name {
            "claude" => {
                // Acknowledges auto mode's billing notice (it would be appended to replies).
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis();
                std::fs::write(
                    home.join(".claude.json"),
                    json!({ "autoModeClassifierBillingNoticeAcknowledgedAt": now }).to_string(),
                )
                .unwrap();
                format!("ANTHROPIC_BASE_URL = \"{url}\"\nANTHROPIC_API_KEY = \"test-key\"\nIS_SANDBOX = \"1\"\n")
            }
            "codex" => {
                let codex_home = home.join(".codex");
                std::fs::create_dir_all(&codex_home).unwrap();
                std::fs::write(
                    codex_home.join("config.toml"),
                    format!("model_provider = \"scripted\"\nmodel = \"gpt-5.4\"\n[model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{url}/v1\"\nwire_api = \"responses\"\nrequires_openai_auth = false\nsupports_websockets = false\n"),
                )
                .unwrap();
                format!("CODEX_HOME = \"{}\"\n", codex_home.display())
            }
            _ => format!("GEMINI_API_KEY = \"test-key\"\nGOOGLE_GEMINI_BASE_URL = \"{url}\"\nGEMINI_CLI_TRUST_WORKSPACE = \"true\"\nGEMINI_CLI_NO_RELAUNCH = \"true\"\n"),
        };
        // The modes where the harness asks before a tool runs: lineage's rule answers (C4).
        let modes = match name {
            "claude" => "root = \"default\"\ndelegated = \"default\"\n",
            "codex" => "root = \"read-only\"\ndelegated = \"read-only\"\n",
            _ => "root = \"default\"\ndelegated = \"default\"\n",
        };
        let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
        let mut variants = vec![
            (name.to_owned(), "auto", modes),
            (format!("{name}-stdio"), "stdio", modes),
        ];
        // `<name>-edit` (Claude, Codex): a delegated child that edits files in its working
        // directory without asking (issue 39): the harness's own mode for it, so lineage's
        // rule is not asked.
        match name {
            "claude" => variants.push((
                "claude-edit".to_owned(),
                "stdio",
                "root = \"default\"\ndelegated = \"acceptEdits\"\n",
            )),
            "codex" => variants.push((
                "codex-edit".to_owned(),
                "stdio",
                "root = \"read-only\"\ndelegated = \"full-access\"\n",
            )),
            _ => {}
        }
        for (profile, transport, modes) in variants {
            toml.push_str(&format!(
                "[agents.{profile}]\ndriver = \"acp\"\ncommand = \"{cmd}\"\nargs = [{args}]\ntools = true\ntools_transport = \"{transport}\"\nprompt_timeout_ms = 180000\nsandbox_read_only = [\"{install}\"]\nsandbox_read_write = [\"{home}\"]\n[agents.{profile}.env]\nHOME = \"{home}\"\n{env}[agents.{profile}.modes]\n{modes}\n",
                cmd = bins.join(bin).display(),
                args = args.join(", "),
                home = home.display(),
                // V2: each session runs in a sandbox that shows the adapters' installation
                // read only and the profile's home read-write.
                install = bins.parent().and_then(|p| p.parent()).expect("tools/harnesses").display(),
            ));
        }
    }
    toml
}

/// The assistant replies in a session's log.
pub fn replies(log: &[Event]) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "turn/assistant")
        .map(|e| text(&e.data["text"]))
        .collect()
}

/// A cluster of three nodes hosting the harnesses, and the model they talk to.
pub struct Fixture {
    pub cluster: Cluster,
    pub model: Model,
    pub _dir: tempfile::TempDir,
}

pub fn fixture(bins: &Path, rules: Value) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::start(dir.path(), &rules);
    let cluster = Cluster::start_with_toml(3, &[], &profiles(bins, dir.path(), model.port));
    Fixture {
        cluster,
        model,
        _dir: dir,
    }
}

impl Fixture {
    pub fn spawn_root(&self, profile: &str, node: &str, prompt: &str) -> String {
        let reply = self
            .cluster
            .spawn(&["--node", node, "--profile", profile, "--prompt", prompt]);
        id_of(&reply["session"])
    }

    pub fn wait_reply(&self, session: &str, what: &str, needle: &str) -> Vec<String> {
        let found = lineage_testkit::poll(Duration::from_secs(240), || {
            let replies = replies(&self.cluster.log(session));
            replies
                .iter()
                .any(|r| r.contains(needle))
                .then_some(replies)
        });
        found.unwrap_or_else(|_| panic!("{what}: not seen in 240 s\n{}", self.diagnose()))
    }

    /// What the model was asked and the nodes' last log lines, for a failure's message.
    pub fn diagnose(&self) -> String {
        let requests: Vec<String> = self
            .model
            .requests()
            .iter()
            .map(|r| {
                format!(
                    "  {} {} {} rule={} last_user={:?} tool_result={:?} reply={}",
                    r["seq"],
                    r["api"],
                    r["kind"],
                    r["rule"],
                    text(&r["last_user"]).chars().take(120).collect::<String>(),
                    text(&r["last_tool_result"])
                        .chars()
                        .take(160)
                        .collect::<String>(),
                    r["reply"].to_string().chars().take(160).collect::<String>()
                )
            })
            .collect();
        format!(
            "model requests:\n{}\nnode logs:\n{}",
            requests.join("\n"),
            self.cluster.logs()
        )
    }
}
