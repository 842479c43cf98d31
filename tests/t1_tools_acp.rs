//! A real ACP agent builds a tree through lineage's tools over MCP (T1, T2, T3, D3), with a
//! real nats-server and real node processes: the ACP test agent, hosted with a profile that has
//! `tools = true`, gets the stdio MCP server `lineage mcp` in its `session/new`, and its
//! `tool:` directives call the tools through it (the official Rust MCP SDK's client). A one-shot
//! spawn returns the child's result inside the agent's turn; the child runs on another node; a
//! spawn past the max depth is a tool error the agent reads.

use std::time::Duration;

use lineage_testkit::binary::delegator_profiles;
use lineage_testkit::prelude::{id_of, Cluster};
use serde_json::Value;

/// The assistant replies in `session`'s log.
fn replies(log: &[lineage_testkit::prelude::Event]) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "turn/assistant")
        .map(|e| e.data["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn t1_t2_an_acp_agent_spawns_a_one_shot_child_on_another_node_through_its_tools() {
    let cluster = Cluster::start_with_toml(3, &[], &delegator_profiles());
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
fn t1_an_acp_agent_that_declares_mcp_http_gets_its_tools_over_http_and_spawns_through_them() {
    // `delegator-http` declares `mcpCapabilities.http` and uses only HTTP entries: a reply
    // from the tool proves the node gave it the loopback URL with its bearer secret.
    let cluster = Cluster::start_with_toml(3, &[], &delegator_profiles());
    let prompt = r#"tool: spawn_subagent {"profile": "echo", "prompt": "over http", "shape": "one-shot", "label": "web", "node": "node-3"}
tool: list_children {}"#;
    let reply = cluster.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator-http",
        "--prompt",
        prompt,
    ]);
    let root = id_of(&reply["session"]);
    let log = cluster.wait_log(
        &root,
        Duration::from_secs(60),
        "both tools' answers",
        |log| {
            replies(log)
                .iter()
                .any(|r| r.contains("tool list_children"))
        },
    );
    let text = replies(&log).join("\n");
    let answer = text
        .lines()
        .find(|r| r.starts_with("tool spawn_subagent"))
        .unwrap_or_else(|| panic!("{text}"));
    let body: Value = serde_json::from_str(
        answer
            .strip_prefix("tool spawn_subagent: ")
            .unwrap_or_else(|| panic!("a tool error: {answer}")),
    )
    .unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert_eq!(body["output"], "over http", "{answer}");
    let child = body["child"].as_str().unwrap().to_owned();
    assert_eq!(cluster.row(&root, &child)["node"], "node-3");
    let listed = text
        .lines()
        .find(|r| r.starts_with("tool list_children"))
        .unwrap();
    assert!(
        listed.starts_with("tool list_children: ") && listed.contains(&child),
        "{listed}"
    );
}

#[test]
fn d3_t5_a_spawn_past_the_max_depth_is_a_tool_error_the_agent_reads() {
    let cluster = Cluster::start_with_toml(1, &[], &delegator_profiles());
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

/// A prompt line that calls `tool` with `args`.
fn line(tool: &str, args: Value) -> String {
    format!("tool: {tool} {args}")
}

/// The JSON body of the reply line of `tool` number `nth` (0-based) among `lines`.
fn body(lines: &[&str], tool: &str, nth: usize) -> Value {
    let prefix = format!("tool {tool}: ");
    let found = lines
        .iter()
        .filter(|l| l.starts_with(&format!("tool {tool}")))
        .nth(nth)
        .unwrap_or_else(|| panic!("no reply {nth} of {tool}: {lines:#?}"));
    let json = found
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("a tool error: {found}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {found}"))
}

#[test]
fn t3_m1_m3_m4_an_acp_agent_waits_for_follows_up_lists_and_interrupts_its_children() {
    let cluster = Cluster::start_with_toml(3, &[], &delegator_profiles());
    // The child is an ACP agent with tools too: it reports to its parent with a tool call.
    let report = |text: &str| {
        line(
            "report_to_parent",
            serde_json::json!({"content": text, "delivery": "wakeup"}),
        )
    };
    let prompt = [
        line(
            "spawn_subagent",
            serde_json::json!({"profile": "delegator", "prompt": report("found it"),
                               "shape": "continuable", "label": "scout", "node": "node-2"}),
        ),
        line("wait_for_children", serde_json::json!({"timeout_ms": 30000})),
        line(
            "send_to_child",
            serde_json::json!({"child": "$child", "content": report("second")}),
        ),
        line("wait_for_children", serde_json::json!({"timeout_ms": 30000})),
        line("list_children", serde_json::json!({})),
        line(
            "spawn_subagent",
            serde_json::json!({"profile": "delegator", "prompt": format!("{}\nslow", report("started")),
                               "shape": "continuable", "label": "sleeper", "node": "node-3"}),
        ),
        // Its report says its turn runs: the interrupt finds it mid-turn.
        line(
            "wait_for_children",
            serde_json::json!({"children": ["$child"], "mode": "any", "timeout_ms": 30000}),
        ),
        line("interrupt_child", serde_json::json!({"child": "$child"})),
        line(
            "wait_for_children",
            serde_json::json!({"children": ["$child"], "timeout_ms": 30000}),
        ),
    ]
    .join("\n");
    let reply = cluster.spawn(&[
        "--node",
        "node-1",
        "--profile",
        "delegator",
        "--prompt",
        &prompt,
    ]);
    let root = id_of(&reply["session"]);
    let log = cluster.wait_log(
        &root,
        Duration::from_secs(120),
        "the tools' answers",
        |log| {
            replies(log)
                .iter()
                .any(|r| r.starts_with("tool spawn_subagent"))
        },
    );
    let reply = replies(&log)
        .into_iter()
        .find(|r| r.starts_with("tool spawn_subagent"))
        .unwrap();
    let lines: Vec<&str> = reply.lines().collect();
    assert_eq!(lines.len(), 9, "{lines:#?}");
    let scout = body(&lines, "spawn_subagent", 0)["child"]
        .as_str()
        .unwrap()
        .to_owned();
    // Its report and its settlement, received in the parent's turn.
    let first = body(&lines, "wait_for_children", 0);
    assert_eq!(first["complete"], true, "{first}");
    let kinds: Vec<(&str, &str)> = first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["kind"].as_str().unwrap(), m["text"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds[0], ("report", "found it"), "{first}");
    assert_eq!(kinds.last().unwrap().0, "settled", "{first}");
    assert!(first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["from"] == scout.as_str()));
    // The followup resumed it; it reported again and settled again.
    assert_eq!(
        body(&lines, "send_to_child", 0),
        serde_json::json!({"delivered": true})
    );
    let second = body(&lines, "wait_for_children", 1);
    assert_eq!(second["complete"], true, "{second}");
    assert_eq!(second["messages"][0]["text"], "second", "{second}");
    let listed = body(&lines, "list_children", 0);
    let child = &listed["children"][0];
    assert_eq!(child["session"], scout.as_str(), "{listed}");
    assert_eq!(child["label"], "scout");
    assert!(child["node"].is_string(), "{listed}");
    assert_eq!(child["shape"], "continuable");
    assert_eq!(child["last_report"], "second");
    // The sleeper, interrupted mid-turn with the parent's authority, settles as interrupted.
    let sleeper = body(&lines, "spawn_subagent", 1)["child"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        body(&lines, "interrupt_child", 0),
        serde_json::json!({"interrupted": true})
    );
    let started = body(&lines, "wait_for_children", 2);
    assert_eq!(started["messages"][0]["text"], "started", "{started}");
    let third = body(&lines, "wait_for_children", 3);
    assert_eq!(third["complete"], true, "{third}");
    let settled = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["kind"] == "settled")
        .unwrap_or_else(|| panic!("{third}"));
    assert_eq!(settled["from"], sleeper.as_str());
    assert!(
        settled["text"].as_str().unwrap().contains("interrupted"),
        "{third}"
    );
    // The tree: both children under the root (the scout wherever its followup resumed it).
    assert_eq!(cluster.row(&root, &scout)["state"], "settled");
    assert_eq!(cluster.row(&root, &sleeper)["node"], "node-3");
}
