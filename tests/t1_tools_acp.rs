//! A real ACP agent builds a tree through lineage's tools over MCP (T1, T2, T3, D3), with a
//! real nats-server and real node processes: the ACP test agent, hosted with a profile that has
//! `tools = true`, gets the stdio MCP server `lineage mcp` in its `session/new`, and its
//! `tool:` directives call the tools through it (the official Rust MCP SDK's client). A one-shot
//! spawn returns the child's result inside the agent's turn; the child runs on another node; a
//! spawn past the max depth is a tool error the agent reads.

use std::time::Duration;

use lineage_testkit::binary::lineage_bin;
use lineage_testkit::prelude::{id_of, Cluster};
use serde_json::Value;

fn profiles() -> String {
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    assert!(
        agent.exists(),
        "{} is missing: cargo build --workspace --bins",
        agent.display()
    );
    format!(
        "[agents.delegator]\ndriver = \"acp\"\ncommand = \"{}\"\ntools = true\n\n[agents.echo]\ndriver = \"script\"\n",
        agent.display()
    )
}

/// The assistant replies in `session`'s log.
fn replies(log: &[lineage_testkit::prelude::Event]) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "turn/assistant")
        .map(|e| e.data["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn t1_t2_an_acp_agent_spawns_a_one_shot_child_on_another_node_through_its_tools() {
    let cluster = Cluster::start_with_toml(3, &[], &profiles());
    let prompt = r#"tool: spawn_subagent {"profile": "echo", "prompt": "hello child", "shape": "one-shot", "label": "kid", "node": "node-2"}"#;
    let reply = cluster.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator",
        "--prompt",
        prompt,
    ]);
    let root = id_of(&reply["session"]);
    let log = cluster.wait_log(&root, Duration::from_secs(60), "the tool's answer", |log| {
        replies(log)
            .iter()
            .any(|r| r.starts_with("tool spawn_subagent"))
    });
    let answer = replies(&log)
        .into_iter()
        .find(|r| r.starts_with("tool spawn_subagent"))
        .unwrap();
    let body: Value = serde_json::from_str(
        answer
            .strip_prefix("tool spawn_subagent: ")
            .unwrap_or_else(|| panic!("a tool error: {answer}")),
    )
    .unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert_eq!(body["output"], "hello child", "{answer}");
    assert_eq!(body["stop_reason"], "completed", "{answer}");
    let child = body["child"].as_str().unwrap().to_owned();
    // In the tree: the root's one-shot child, placed on node-2, done.
    let row = cluster.row(&root, &child);
    assert_eq!(row["node"], "node-2", "{row}");
    assert_eq!(row["state"], "disposed", "{row}");
    // In the root's log, as any spawn from a turn.
    assert!(
        log.iter()
            .any(|e| e.kind == "subagent/spawned" && e.data["child"] == child.as_str()),
        "{log:?}"
    );
}

#[test]
fn d3_t5_a_spawn_past_the_max_depth_is_a_tool_error_the_agent_reads() {
    let cluster = Cluster::start_with_toml(1, &[], &profiles());
    let prompt = r#"tool: spawn_subagent {"profile": "echo", "prompt": "x", "shape": "one-shot"}"#;
    let reply = cluster.spawn(&[
        "--profile",
        "delegator",
        "--max-depth",
        "0",
        "--prompt",
        prompt,
    ]);
    let root = id_of(&reply["session"]);
    let log = cluster.wait_log(
        &root,
        Duration::from_secs(60),
        "the tool's refusal",
        |log| {
            replies(log)
                .iter()
                .any(|r| r.starts_with("tool spawn_subagent"))
        },
    );
    let answer = replies(&log)
        .into_iter()
        .find(|r| r.starts_with("tool spawn_subagent"))
        .unwrap();
    assert_eq!(
        answer,
        "tool spawn_subagent error: registry refused: subagent depth 1 exceeds max depth 0; finish without delegating further or raise max_depth",
        "word for word what the model reads"
    );
    assert_eq!(cluster.tree(&root).len(), 1, "nothing was born");
}
