//! MCP tasks for long children (A3), with a real nats-server, real node processes and an MCP
//! client this project did not write: the official Python MCP SDK (`tests/mcp_tasks/client.py`,
//! a `ClientExtension` declaring `io.modelcontextprotocol/tasks`), run by a hosted ACP agent
//! from its shell, so it speaks to the session's tools through `lineage mcp` as the agent's own
//! MCP server entry does.
//!
//! - A one-shot `spawn_subagent` answers at once with a task whose id is the child's session;
//!   `tasks/get` goes from `working` to `completed` with the child's output, read from the
//!   registry and the child's log: a second client process (no shared memory) reads the same
//!   task, and the child runs on the other node.
//! - `tasks/cancel` interrupts the child: the task ends `cancelled`, the record says
//!   `interrupted`; a second cancel and a bad id are one-line errors.
//! - `wait_for_children` answers with a `wait-all:` task that completes with the child's
//!   output; the SDK's own `call_tool` resolves a task through the extension's resolver.
//! - A client without the extension gets today's blocking call.

use std::time::Duration;

use lineage_testkit::binary::lineage_bin;
use lineage_testkit::prelude::{id_of, Cluster};
use serde_json::Value;

fn profiles() -> String {
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    format!(
        "[agents.tasker]\ndriver = \"acp\"\ncommand = \"{agent}\"\ntools = true\nisolation = \"none\"\nprompt_timeout_ms = 120000\n\n[agents.worker]\ndriver = \"acp\"\ncommand = \"{agent}\"\nisolation = \"none\"\n",
        agent = agent.display()
    )
}

fn python_mcp_with_extensions() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import mcp.client.extension"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the Python MCP SDK >= 2.3 is missing: bash scripts/install-deps.sh installs it"
    );
}

/// Runs the client with `args` as a `tasker` root's shell command on node-1, and returns the
/// root and the JSON object the client printed.
fn run_client(cluster: &Cluster, args: &[&str]) -> (String, Value) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_tasks/client.py");
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let prompt = format!(
        "sh: python3 {script} {} {}",
        lineage_bin().display(),
        quoted.join(" ")
    );
    let reply = cluster.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "tasker",
        "--prompt",
        &prompt,
    ]);
    let root = id_of(&reply["session"]);
    let log = cluster.wait_log(
        &root,
        Duration::from_secs(120),
        "the client's answer",
        |log| log.iter().any(|e| e.kind == "turn/assistant"),
    );
    let text = log
        .iter()
        .find(|e| e.kind == "turn/assistant")
        .and_then(|e| e.data["text"].as_str())
        .unwrap_or_default()
        .to_owned();
    let json = text
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("the client printed no JSON: {text}"));
    let out: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}"));
    eprintln!("client {}: {out}", args[0]);
    assert!(text.starts_with("sh exit 0"), "{text}");
    (root, out)
}

fn body(text: &Value) -> Value {
    serde_json::from_str(text.as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn a3_a_one_shot_spawn_is_a_task_read_from_the_registry_by_any_client() {
    python_mcp_with_extensions();
    let cluster = Cluster::start_with_toml(3, &[], &profiles());
    let (root, out) = run_client(
        &cluster,
        &["spawn", "worker", "sh: sleep 3; echo dug-it", "node-2"],
    );
    assert_eq!(
        out["server_tasks"], true,
        "the tools advertise the extension: {out}"
    );
    let handle = &out["handle"];
    assert_eq!(handle["resultType"], "task", "{out}");
    assert_eq!(handle["status"], "working", "{out}");
    assert_eq!(handle["pollIntervalMs"], 500, "{out}");
    let child = handle["taskId"].as_str().unwrap().to_owned();
    // Seen working, then completed with the child's output.
    assert_eq!(
        out["seen"],
        serde_json::json!(["working", "completed"]),
        "{out}"
    );
    let result = body(&out["text"]);
    assert_eq!(result["child"], child.as_str(), "{out}");
    assert_eq!(result["stop_reason"], "completed", "{out}");
    assert!(
        result["output"]
            .as_str()
            .unwrap_or_default()
            .contains("dug-it"),
        "{out}"
    );
    // Once the child ended, the task says how long it stays readable: until the node's
    // retention purges the child's record (Q5).
    assert!(out["final"]["ttlMs"].as_u64().is_some(), "{out}");
    assert!(
        handle["ttlMs"].is_null(),
        "unknown while the child lives: {out}"
    );
    // The task id is the child's session, born on node-2, a child of the root.
    let row = cluster.row(&root, &child);
    assert_eq!(row["node"], "node-2", "{row}");

    // Another client (another process: nothing in common but the registry) reads the same
    // task from a root of its own: the child is not its child, so one line and no answer; a
    // malformed id is one line too.
    let (_, other) = run_client(&cluster, &["get", &child]);
    let error = other["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("is not a child of session") && !error.contains('\n'),
        "{other}"
    );
    let (_, bad) = run_client(&cluster, &["get", "wait-all:nope"]);
    let error = bad["error"].as_str().unwrap_or_default();
    assert!(error.contains("taskId") && !error.contains('\n'), "{bad}");
    // Nothing changed: the child is as it was.
    assert_eq!(cluster.row(&root, &child)["state"], row["state"]);
}

#[test]
fn a3_tasks_cancel_interrupts_the_child_and_a_finished_task_cannot_be_cancelled_again() {
    python_mcp_with_extensions();
    let cluster = Cluster::start_with_toml(1, &[], &profiles());
    let (root, out) = run_client(&cluster, &["cancel", "worker", "slow one"]);
    let child = out["handle"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(out["final"]["status"], "cancelled", "{out}");
    assert_eq!(out["seen"].as_array().unwrap().last().unwrap(), "cancelled");
    let bad = out["bad_cancel"].as_str().unwrap_or_default();
    assert!(bad.contains("taskId") && !bad.contains('\n'), "{out}");
    let again = out["cancel_again"].as_str().unwrap_or_default();
    assert!(again.contains("already finished"), "{out}");
    let row = cluster.row(&root, &child);
    assert_eq!(row["stop_reason"], "interrupted", "{row}");
}

#[test]
fn a3_wait_for_children_is_a_task_and_a_client_without_the_extension_is_held() {
    python_mcp_with_extensions();
    let cluster = Cluster::start_with_toml(1, &[], &profiles());
    let (_, out) = run_client(
        &cluster,
        &["wait", "worker", "sh: sleep 1; echo waited-for"],
    );
    let child = out["child"].as_str().unwrap().to_owned();
    assert_eq!(
        out["handle"]["taskId"],
        format!("wait-all:{child}").as_str(),
        "{out}"
    );
    assert_eq!(out["handle"]["status"], "working", "{out}");
    assert_eq!(out["seen"].as_array().unwrap().last().unwrap(), "completed");
    let result = body(&out["text"]);
    assert_eq!(result["complete"], true, "{out}");
    assert!(
        result["children"][0]["output"]
            .as_str()
            .unwrap_or_default()
            .contains("waited-for"),
        "{out}"
    );
    // The SDK's call_tool resolved a one-shot task to the child's result.
    let resolved = body(&out["resolved"]);
    assert!(
        resolved["output"]
            .as_str()
            .unwrap_or_default()
            .contains("waited-for"),
        "{out}"
    );

    let (_, plain) = run_client(&cluster, &["plain", "worker", "sh: sleep 2; echo held"]);
    let result = body(&plain["text"]);
    assert!(
        result["output"]
            .as_str()
            .unwrap_or_default()
            .contains("held"),
        "{plain}"
    );
    assert_eq!(result["stop_reason"], "completed", "{plain}");
}
