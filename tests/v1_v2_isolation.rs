//! V1, V2 (issue 33), end to end: agents of two trees on one node cannot touch each other.
//!
//! The attack as it was reported: an agent of one tree scanned `/proc/*/environ` for
//! `LINEAGE_MCP_SECRET`, found the secret of another tree's session in the environment of its
//! `lineage mcp` bridge, and with `env LINEAGE_MCP_SECRET=... LINEAGE_MCP_SOCKET=... lineage mcp`
//! spawned a child in the victim's tree. Here the attacker is the ACP test agent, hosted with
//! the `delegator` profile like the victim (each in the sandbox the node gives it), running
//! shell commands as any real agent does (`sh:` lines). The victim's secret is in the
//! environment of a process of its session, as the bridge's is. The attacker:
//! - scans every `/proc/<pid>/environ` it can see: it finds its own secret only;
//! - is handed the victim's secret anyway (the test reads it as the node's user could) and runs
//!   the bridge with it: the node refuses the connection (the peer is not in the victim's
//!   sandbox), logs it with the attacker's session id, and nothing is spawned in the victim's
//!   tree;
//! - cannot list the victim's working directory, the node's data directory, signal the victim's
//!   process or read its environment;
//!
//! and the victim's turn ends as it would have. Run with the nodes as root and as an
//! unprivileged user (uid 65534).

use std::path::{Path, PathBuf};
use std::time::Duration;

use lineage_testkit::binary::delegator_profiles;
use lineage_testkit::cluster::ClusterOptions;
use lineage_testkit::prelude::{id_of, Cluster, Event};

const T: Duration = Duration::from_secs(60);

/// The assistant replies in a log.
fn replies(log: &[Event]) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "turn/assistant")
        .map(|e| e.data["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Panics with what to install when this machine cannot make sandboxes.
fn sandboxes_here() {
    if let lineage_drivers::sandbox::Support::Missing(why) =
        lineage_drivers::sandbox::probe(std::env::var("PATH").ok().as_deref())
    {
        panic!("this machine cannot make agent sandboxes: {why} (scripts/install-deps.sh installs bubblewrap)");
    }
}

/// A root of the `delegator` profile on node-1 with `prompt`.
fn root(c: &Cluster, prompt: &str) -> String {
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator",
        "--prompt",
        prompt,
    ]);
    id_of(&reply["session"])
}

/// The first reply of `session` that contains `marker`.
fn reply_with(c: &Cluster, session: &str, marker: &str) -> String {
    let log = c.wait_log(session, T, marker, |log| {
        replies(log).iter().any(|r| r.contains(marker))
    });
    replies(&log)
        .into_iter()
        .find(|r| r.contains(marker))
        .expect("found")
}

/// A process (pid, environment) whose working directory is `workdir` and whose environment
/// holds a tools secret, as the test (root) sees it from outside.
fn process_with_secret(workdir: &Path) -> Option<(i32, Vec<(String, String)>)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read_link(entry.path().join("cwd")).ok().as_deref() != Some(workdir) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let vars: Vec<(String, String)> = environ
            .split(|b| *b == 0)
            .filter_map(|v| {
                let (k, v) = std::str::from_utf8(v).ok()?.split_once('=')?;
                Some((k.to_owned(), v.to_owned()))
            })
            .collect();
        if vars.iter().any(|(k, _)| k == "LINEAGE_MCP_SECRET") {
            return Some((pid, vars));
        }
    }
    None
}

fn var<'a>(vars: &'a [(String, String)], name: &str) -> &'a str {
    vars.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("{name} is not set"))
}

/// The uids of `agents.sandbox_uids` in the root-with-uids variant.
const UIDS: std::ops::RangeInclusive<u32> = 200_000..=200_099;

/// The uid process `pid` runs as.
fn uid_of(pid: i32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn attack(run_as: Option<u32>, sandbox_uids: bool) {
    sandboxes_here();
    let uids = match sandbox_uids {
        true => format!(
            "[agents]\nsandbox_uids = \"{}-{}\"\n",
            UIDS.start(),
            UIDS.end()
        ),
        false => String::new(),
    };
    let c = Cluster::start_opts(
        1,
        ClusterOptions {
            extra_toml: format!("{uids}{}", delegator_profiles()),
            run_as,
            ..Default::default()
        },
    );
    if let Some(uid) = run_as {
        let pid = c.nodes[0].pid().expect("node-1 runs");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert_eq!(
            line.split_whitespace().nth(1),
            Some(uid.to_string().as_str()),
            "{line}"
        );
    }
    let data_dir: PathBuf = c.dir.path().join("data-1");
    // The node keeps two warm sandboxes of the profile, each waiting in lineage-sandbox-exec.
    lineage_testkit::wait::poll(T, || (waiting_sandboxes(&data_dir) >= 2).then_some(()))
        .unwrap_or_else(|_| panic!("no two warm sandboxes wait\n{}", c.logs()));
    // The victim: a turn whose shell command holds its session's secret for 20 s.
    let victim = root(&c, "sh: sleep 20; echo victim-done");
    let victim_work = data_dir.join("work").join(&victim);
    // It took one over: its working directory is a link to the sandbox's.
    let taken = std::fs::read_link(&victim_work).unwrap_or_default();
    assert!(
        taken.to_string_lossy().starts_with(".spare-"),
        "the victim made its own sandbox although two waited ({taken:?})\n{}",
        c.logs()
    );
    let (victim_pid, victim_env) =
        // The session's working directory may be a link to the warm sandbox's it took over.
        lineage_testkit::wait::poll(T, || {
            process_with_secret(&std::fs::canonicalize(&victim_work).ok()?)
        })
            .unwrap_or_else(|_| panic!("no process of the victim holds its secret\n{}", c.logs()));
    let secret = var(&victim_env, "LINEAGE_MCP_SECRET").to_owned();
    let socket = var(&victim_env, "LINEAGE_MCP_SOCKET").to_owned();
    let bridge = lineage_testkit::lineage_bin();

    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"evil","version":"1"}}}"#;
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"spawn_subagent","arguments":{"profile":"echo","prompt":"INJECTED-BY-EVIL","shape":"continuable","label":"planted-by-evil"}}}"#;
    let prompt = [
        "sh: for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null | grep '^LINEAGE_MCP_SECRET='; done; echo scan-done".to_owned(),
        format!(
            "sh: printf '%s\\n' '{initialize}' '{initialized}' '{call}' | env LINEAGE_MCP_SECRET={secret} LINEAGE_MCP_SOCKET={socket} {} mcp; echo bridge-done",
            bridge.display()
        ),
        format!(
            "sh: ls {}",
            std::fs::canonicalize(&victim_work).unwrap().display()
        ),
        format!("sh: ls {}", data_dir.join("registry").display()),
        format!("sh: kill -0 {victim_pid}"),
        format!("sh: cat /proc/{victim_pid}/environ"),
        "sh: id -u".to_owned(),
    ]
    .join("\n");
    let attacker = root(&c, &prompt);
    let out = reply_with(&c, &attacker, "bridge-done");

    // The scan saw the attacker's own secret at most, never the victim's.
    assert!(out.contains("scan-done"), "{out}");
    assert!(
        !out.contains(&secret),
        "the attacker read the victim's secret:\n{out}"
    );
    // The bridge with the victim's secret was refused: the peer is not the victim's.
    assert!(
        out.contains(lineage_drivers::tools::socket::FOREIGN_LINE),
        "the bridge was not refused as foreign:\n{out}"
    );
    // Each of the four probes failed (exit codes after `sh exit`).
    let exits: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("sh exit "))
        .map(|l| l.trim_end_matches(':'))
        .collect();
    assert_eq!(exits.len(), 7, "{out}");
    for (probe, exit) in [
        "ls victim workdir",
        "ls the registry's data",
        "kill -0",
        "cat environ",
    ]
    .iter()
    .zip(&exits[2..])
    {
        assert_ne!(*exit, "0", "{probe} succeeded:\n{out}");
    }

    // With agents.sandbox_uids, each session's sandbox runs as a uid of its own, outside its
    // namespaces too.
    let attacker_uid: u32 = out
        .split("sh exit 0:\n")
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no uid in {out}"));
    let victim_uid = uid_of(victim_pid);
    if sandbox_uids {
        assert!(UIDS.contains(&victim_uid), "victim runs as {victim_uid}");
        assert!(
            UIDS.contains(&attacker_uid),
            "attacker runs as {attacker_uid}"
        );
        assert_ne!(victim_uid, attacker_uid);
        let workdir = std::fs::metadata(&victim_work).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((workdir.uid(), workdir.mode() & 0o777), (victim_uid, 0o700));
    } else {
        assert_eq!(victim_uid, run_as.unwrap_or(0), "the node's own user");
    }

    // Logged with both sessions.
    let log = c.nodes[0].log_text();
    let refusal = log
        .lines()
        .find(|l| l.contains("not its own: refused"))
        .unwrap_or_else(|| panic!("no refusal in the node's log\n{log}"));
    assert!(
        refusal.contains(&attacker) && refusal.contains(&victim),
        "{refusal}"
    );
    assert!(!log.contains(&secret), "the node logged a secret");

    // Nothing was planted; the victim's own work is unaffected.
    let done = reply_with(&c, &victim, "victim-done");
    assert!(done.starts_with("sh exit 0:"), "{done}");
    let tree = c.cli_json(&["tree", &victim]);
    assert!(
        !tree.to_string().contains("planted-by-evil"),
        "a child was planted in the victim's tree: {tree}"
    );
    let log = c.log(&victim);
    assert!(
        !log.iter().any(|e| e.kind == "subagent/spawned"),
        "the victim's log has a spawn: {log:?}"
    );
}

#[test]
fn v1_v2_an_agent_cannot_use_another_trees_secret_or_touch_its_files_processes_or_environment_as_root(
) {
    attack(None, false);
}

#[test]
fn v1_v2_an_agent_cannot_use_another_trees_secret_or_touch_its_files_processes_or_environment_as_root_with_a_uid_per_session(
) {
    attack(None, true);
}

#[test]
fn v1_v2_an_agent_cannot_use_another_trees_secret_or_touch_its_files_processes_or_environment_unprivileged(
) {
    attack(Some(65534), false);
}

/// The processes (as the test sees them) whose working directory is `workdir`.
/// How many warm sandboxes of the node with `data_dir` wait: processes running
/// `lineage-sandbox-exec` in a directory under its `work`.
fn waiting_sandboxes(data_dir: &Path) -> usize {
    let work = data_dir.join("work");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .ok()
                .and_then(|c| c.split(|b| *b == 0).next().map(<[u8]>::to_vec))
                .is_some_and(|arg0| arg0.ends_with(b"/lineage-sandbox-exec"))
                && std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(&work))
        })
        .count()
}

fn processes_in(workdir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<i32>().ok()?;
            (std::fs::read_link(e.path().join("cwd")).ok().as_deref() == Some(workdir))
                .then_some(pid)
        })
        .collect()
}

#[test]
fn v2_a_drain_ends_every_process_of_the_sandbox_also_one_that_left_the_group() {
    sandboxes_here();
    let c = Cluster::start_with_toml(1, &[], &delegator_profiles());
    // A process that leaves the agent's process group and session (setsid), as a harness's
    // helper or a model's `nohup ... &` does.
    let session = root(
        &c,
        "sh: setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo escaped",
    );
    reply_with(&c, &session, "escaped");
    let workdir = std::fs::canonicalize(c.dir.path().join("data-1").join("work").join(&session))
        .expect("the session's working directory");
    let live = processes_in(&workdir);
    assert!(
        !live.is_empty(),
        "the escaped sleep runs in {}",
        workdir.display()
    );
    let (code, _, err) = c.cli(&["drain", &session]);
    assert_eq!(code, 0, "{err}");
    let gone = lineage_testkit::wait::poll(Duration::from_secs(10), || {
        processes_in(&workdir).is_empty()
    });
    assert!(
        gone.is_ok(),
        "processes of the drained session still run: {:?}",
        processes_in(&workdir)
    );
}

#[test]
fn v2_a_profile_that_asks_for_a_sandbox_on_a_node_that_cannot_make_one_refuses_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    let text = lineage_testkit::node::NodeConfig {
        cluster: "e2e",
        nats_url: "nats://127.0.0.1:1",
        id: "node-1",
        data_dir: &dir.path().join("data"),
        http_port: 0,
        role: lineage_testkit::node::Role::Voter {
            raft_id: 1,
            bootstrap: true,
        },
        voters: &lineage_testkit::node::voters_line(1),
    }
    .render();
    std::fs::write(
        &config,
        format!("{text}\n[agents.strict]\ndriver = \"acp\"\ncommand = \"/bin/true\"\nisolation = \"sandbox\"\n"),
    )
    .unwrap();
    // No bubblewrap on this PATH.
    let out = std::process::Command::new(lineage_testkit::lineage_bin())
        .args(["node", "--config"])
        .arg(&config)
        .env("PATH", dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("agents.strict.isolation"))
        .unwrap_or_else(|| panic!("no line names the key:\n{err}"));
    assert!(line.contains("bubblewrap"), "{line}");
    assert!(
        !dir.path().join("data").join("registry").exists(),
        "it started: {err}"
    );
}

#[test]
fn v2_bad_isolation_keys_are_refused_at_load_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let base = format!(
        "cluster = \"e2e\"\nnats_url = \"nats://127.0.0.1:1\"\n[node]\nid = \"node-1\"\ndata_dir = {:?}\n",
        dir.path().join("data").display().to_string()
    );
    let cases = [
        (
            "[agents.x]\ndriver = \"acp\"\ncommand = \"/bin/true\"\nisolation = \"maybe\"\n",
            "`auto`, `sandbox`, `none`",
        ),
        ("[agents]\nsandbox_uids = \"abc\"\n", "agents.sandbox_uids"),
        ("[agents]\nsandbox_uids = \"0-10\"\n", "FIRST-LAST"),
        (
            "[agents.x]\ndriver = \"acp\"\ncommand = \"/bin/true\"\nsandbox_read_only = [\"rel\"]\n",
            "agents.x.sandbox_read_only",
        ),
    ];
    for (toml, says) in cases {
        let config = dir.path().join("node.toml");
        std::fs::write(&config, format!("{base}{toml}")).unwrap();
        let out = std::process::Command::new(lineage_testkit::lineage_bin())
            .args(["node", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{toml}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{toml}: {err}");
        assert!(err.contains(says), "{toml}: {err}");
        assert!(
            !dir.path().join("data").exists(),
            "{toml}: something was created"
        );
    }
}
