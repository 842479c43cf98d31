//! A remote A2A agent as a child in a lineage tree (issue 38, A2): a profile with
//! `driver = "a2a"` names a remote agent's URL (here `lineage a2a` in front of the ACP test
//! agent, an A2A server the Python `a2a-sdk` suite checks), and the bearer token comes from
//! the node's environment. The child's turns are the remote task's messages, one remote task
//! for the child's whole life (kept across a cold resume in `driver/state`); a drain cancels
//! the remote task.

use std::time::Duration;

use lineage_testkit::binary::{delegator_profiles, lineage_bin};
use lineage_testkit::free_port;
use lineage_testkit::prelude::{wait_for, Cluster};
use serde_json::{json, Value};

mod a2a;
use a2a::{ok, python_a2a_installed, Gateway, TOKEN};

/// `helper`, the ACP test agent offered over A2A; `remote`, an A2A child profile that reaches
/// helper through the gateway on `port`, with the token from `LINEAGE_TEST_A2A_TOKEN`.
fn profiles(port: u16) -> String {
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    format!(
        "{}\n[agents.helper]\ndriver = \"acp\"\ncommand = \"{agent}\"\na2a = true\n\n[agents.remote]\ndriver = \"a2a\"\nurl = \"http://127.0.0.1:{port}/agents/helper\"\nbearer_env = \"LINEAGE_TEST_A2A_TOKEN\"\ndescription = \"helper, over A2A\"\n",
        delegator_profiles(),
        agent = agent.display()
    )
}

/// The child's last reply, once its turn `turns` ended.
fn reply_after(c: &Cluster, child: &str, turns: u64) -> String {
    wait_for(Duration::from_secs(60), "the child's turn to end", || {
        let shown = c.cli_json(&["show", child]);
        let glance = &shown["glance"];
        (glance["turns"].as_u64() == Some(turns) && glance["in_turn"] == false)
            .then(|| glance["last_reply"].as_str().unwrap_or_default().to_owned())
    })
}

/// The remote task the child's log names last.
fn remote_task(c: &Cluster, child: &str) -> Option<String> {
    c.log(child)
        .iter()
        .rev()
        .find(|e| e.kind == "driver/state")
        .and_then(|e| e.data["a2a"]["task"].as_str().map(str::to_owned))
}

#[test]
fn a2_a_remote_a2a_agent_is_a_child_with_one_task_that_outlives_its_node_and_ends_with_a_drain() {
    python_a2a_installed();
    let port = free_port().expect("a free port");
    let mut c = Cluster::start_with_toml(
        3,
        &[
            ("LINEAGE_TEST_A2A_TOKEN", TOKEN),
            ("LINEAGE_LEASE__TAKEOVER_AFTER_MS", "500"),
        ],
        &profiles(port),
    );
    let gateway = Gateway::start_on(&c, port);
    // `lineage agents` shows the remote profile's driver and helper's A2A offer, never the
    // remote's URL.
    let (code, listed, _) = c.cli(&["agents"]);
    assert_eq!(code, 0, "{listed}");
    let line = |name: &str| {
        listed
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name}: {listed}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(line("remote")[1], "a2a", "{listed}");
    assert_eq!(line("helper")[3], "a2a", "{listed}");
    assert!(!listed.contains(&port.to_string()), "{listed}");
    // A root on node-1 whose turn spawns the remote agent as a continuable child on node-2.
    let script = json!({
        "turns": [[{"do": "spawn", "shape": "continuable", "node": "node-2", "label": "far",
                    "prompt": "hello remote", "agent": {"driver": "profile", "profile": "remote"}}]],
        "after": {"do": "echo"}
    });
    let root = c.spawn_root("node-1", &script);
    let child = wait_for(Duration::from_secs(30), "the remote child", || {
        c.tree(&root)
            .into_iter()
            .find(|r| r["label"] == "far")
            .and_then(|r| r["session"].as_str().map(str::to_owned))
    });
    let row = c
        .tree(&root)
        .into_iter()
        .find(|r| r["session"] == child.as_str())
        .unwrap();
    assert_eq!(row["depth"], 1, "a child like any other: {row}");
    // Its turn is the remote agent's answer.
    assert_eq!(reply_after(&c, &child, 1), "echo: hello remote [turn 1]");
    let task = remote_task(&c, &child).expect("the remote task is in the child's log");
    // A followup is the same remote task's next message.
    c.cli(&["send", &child, "and again"]);
    assert_eq!(reply_after(&c, &child, 2), "echo: and again [turn 2]");
    assert_eq!(remote_task(&c, &child).as_deref(), Some(task.as_str()));

    // The child's node dies. The child (settled after its turn: cold) is resumed elsewhere by
    // its next followup, and still talks to the same remote task.
    c.nodes[1].kill();
    wait_for(
        Duration::from_secs(30),
        "the followup delivered elsewhere",
        || {
            let (code, out, _) = c.cli(&["--json", "send", &child, "after the loss"]);
            (code == 0).then_some(out)
        },
    );
    // The same remote task answers (its own session may have been on the dead node too, and
    // resumed with its history: the reply's turn count is the remote's business).
    let reply = reply_after(&c, &child, 3);
    assert!(
        reply.starts_with("echo: ") && reply.ends_with("after the loss [turn 3]")
            || reply.contains("after the loss [turn 1]") && reply.contains("and again"),
        "the resumed child went on with its remote task: {reply}\n{}",
        c.cli(&["logs", &child]).1
    );
    assert_eq!(remote_task(&c, &child).as_deref(), Some(task.as_str()));

    // A drain of the tree while the child is in a turn (the remote works slowly on it)
    // cancels the remote task.
    c.cli(&["send", &child, "slow work"]);
    wait_for(Duration::from_secs(30), "the child's slow turn", || {
        let shown = c.cli_json(&["show", &child]);
        (shown["glance"]["in_turn"] == true).then_some(())
    });
    let (code, out, err) = c.cli(&["drain", &root]);
    assert_eq!(code, 0, "{out}{err}");
    let remote = wait_for(Duration::from_secs(30), "the remote task canceled", || {
        let got: Value = ok(&["get", &gateway.url("helper"), TOKEN, &task]);
        (got["task"]["status"]["state"] == "TASK_STATE_CANCELED").then_some(got)
    });
    assert_eq!(remote["task"]["id"], task.as_str());
}

#[test]
fn a2_a_node_without_an_a2a_profiles_token_refuses_to_start_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            "cluster = \"e2e\"\nnats_url = \"nats://127.0.0.1:1\"\n[node]\nid = \"node-1\"\ndata_dir = {:?}\n\n[agents.remote]\ndriver = \"a2a\"\nurl = \"http://127.0.0.1:1/agents/x\"\nbearer_env = \"LINEAGE_TEST_A2A_TOKEN_UNSET\"\n",
            dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(lineage_bin())
        .args(["node", "--config"])
        .arg(&config)
        .env_remove("LINEAGE_TEST_A2A_TOKEN_UNSET")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("agents.remote.bearer_env") && err.contains("LINEAGE_TEST_A2A_TOKEN_UNSET"),
        "{err}"
    );
    assert!(!dir.path().join("data").exists(), "nothing was created");
    // A profile that names no http agent is refused at load, as any bad key.
    std::fs::write(
        &config,
        format!(
            "cluster = \"e2e\"\nnats_url = \"nats://127.0.0.1:1\"\n[node]\nid = \"node-1\"\ndata_dir = {:?}\n\n[agents.remote]\ndriver = \"a2a\"\nurl = \"ftp://x\"\n",
            dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(lineage_bin())
        .args(["node", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("agents.remote.url"), "{err}");
}

#[test]
fn a2_a_drain_cancels_the_remote_task_of_a_cold_a2a_child() {
    python_a2a_installed();
    let port = free_port().expect("a free port");
    let c = Cluster::start_with_toml(1, &[("LINEAGE_TEST_A2A_TOKEN", TOKEN)], &profiles(port));
    let gateway = Gateway::start_on(&c, port);
    let script = json!({
        "turns": [[{"do": "spawn", "shape": "continuable", "label": "far",
                    "prompt": "hello remote", "agent": {"driver": "profile", "profile": "remote"}}]],
        "after": {"do": "echo"}
    });
    let root = c.spawn_root("node-1", &script);
    let child = wait_for(Duration::from_secs(30), "the remote child", || {
        c.tree(&root)
            .into_iter()
            .find(|r| r["label"] == "far")
            .and_then(|r| r["session"].as_str().map(str::to_owned))
    });
    assert_eq!(reply_after(&c, &child, 1), "echo: hello remote [turn 1]");
    let task = remote_task(&c, &child).expect("the remote task is in the child's log");
    // Its turn over, the child is settled: hosted nowhere, with no driver to tell the remote.
    c.wait_state(&root, &child, "settled", Duration::from_secs(30));
    let before: Value = ok(&["get", &gateway.url("helper"), TOKEN, &task]);
    assert_eq!(
        before["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{before}"
    );
    let (code, out, err) = c.cli(&["drain", &root]);
    assert_eq!(code, 0, "{out}{err}");
    // The drain disposed it from the registry and told its remote side: canceled.
    let after: Value = ok(&["get", &gateway.url("helper"), TOKEN, &task]);
    assert_eq!(
        after["task"]["status"]["state"], "TASK_STATE_CANCELED",
        "{after}"
    );
}
