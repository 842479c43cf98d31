//! `lineage bench tools` (T1): a spawn through the delegation tools over MCP vs the same spawn
//! through the control service, in one run.
//!
//! Both spawn a one-shot `echo` child (a scripted profile) on node 2 of the same top-level
//! session on node 1, one at a time, and wait for its result. The tool path: that session runs
//! the ACP test agent with `tools = true` (profile `delegator` of `lineage dev`'s config), and
//! one prompt (`tool-bench: N spawn_subagent {...}`) makes it call `spawn_subagent` N times over
//! one MCP connection (`lineage mcp` -> the node's tools socket -> the session's turn); the
//! agent times each call. The peer: N `spawn` requests to node 1's control service, timed by
//! the bench, for children of the same session. What the tools add is the difference.

use std::time::{Duration, Instant};

use lineage_bus::control::ControlError;
use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::SessionId;
use lineage_protocol::agent::AgentSpec;
use lineage_protocol::control::SpawnRequest;
use serde_json::{json, Value};

use super::{internal, scaled, spawn_request, Bench};
use crate::bench::Samples;

/// The profile of the agent that calls the tools, and of the children (`lineage dev` ships both).
const AGENT: &str = "delegator";
const CHILD: &str = "echo";

pub(super) async fn tools(b: &Bench) -> Result<(), ControlError> {
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    let n = scaled(200);
    let warmup = 10;
    println!("one-shot `{CHILD}` child on {cn} of a top-level `{AGENT}` session on {pn}, one at a time: through its MCP tools (timed by the agent) and through the control service (timed here)");
    let args = json!({"profile": CHILD, "prompt": "x", "shape": "one-shot", "node": cn});
    let mut root = spawn_request(None, None, lineage_protocol::script::Script::done(), &pn);
    root.agent = AgentSpec::Profile {
        profile: AGENT.to_owned(),
    };
    root.prompt = format!("tool-bench: {} spawn_subagent {args}", n + warmup);
    let session = b.ctl.spawn(&pn, &root).await?.session;
    let reply = agent_reply(b, &session).await?;
    let body: Value = reply
        .strip_prefix("tool-bench spawn_subagent: ")
        .and_then(|b| serde_json::from_str(b).ok())
        .ok_or_else(|| internal(format!("the agent's tool bench failed: {reply}")))?;
    if let Some(first) = body["errors"].as_array().and_then(|e| e.first()) {
        return Err(internal(format!(
            "a spawn through the tools failed: {first}"
        )));
    }
    let micros: Vec<u64> = body["micros"]
        .as_array()
        .map(|m| m.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let tool_samples = Samples {
        latencies: micros
            .iter()
            .skip(warmup)
            .map(|us| Duration::from_micros(*us))
            .collect(),
        wall: Duration::from_micros(micros.iter().skip(warmup).sum()),
    };
    // The same spawn through the control service, children of the same session.
    let mut child: SpawnRequest = spawn_request(
        Some(&session),
        Some(SubagentShape::OneShot),
        lineage_protocol::script::Script::done(),
        &cn,
    );
    child.agent = AgentSpec::Profile {
        profile: CHILD.to_owned(),
    };
    child.prompt = "x".to_owned();
    let mut latencies = Vec::with_capacity(n);
    let wall = Instant::now();
    for i in 0..(n + warmup) {
        let started = Instant::now();
        b.ctl.spawn(&pn, &child).await?;
        if i >= warmup {
            latencies.push(started.elapsed());
        }
    }
    let service = Samples {
        latencies,
        wall: wall.elapsed(),
    };
    b.report("spawn one-shot via the control service", &service);
    b.report("spawn one-shot via the MCP tool", &tool_samples);
    let (t, s) = (tool_samples.p50(), service.p50());
    println!(
        "the tool path adds {:+.3} ms at p50 ({:.3} vs {:.3} ms; aim: under 1 ms)",
        (t.as_secs_f64() - s.as_secs_f64()) * 1e3,
        t.as_secs_f64() * 1e3,
        s.as_secs_f64() * 1e3
    );
    Ok(())
}

/// The agent's reply to its first prompt, from the session's log (bounded wait).
async fn agent_reply(b: &Bench, session: &SessionId) -> Result<String, ControlError> {
    let events =
        lineage_bus::events::EventLogStore::open(b.ctl.client.clone(), b.ctl.subjects.clone())
            .await
            .map_err(ControlError::from)?;
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        let (log, _) = events.read(session).await.map_err(ControlError::from)?;
        if let Some(text) = log
            .iter()
            .filter(|e| e.kind == "turn/assistant")
            .find_map(|e| e.data["text"].as_str())
        {
            return Ok(text.to_owned());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(internal(format!(
        "session {session} did not answer its tool bench within 600 s"
    )))
}
