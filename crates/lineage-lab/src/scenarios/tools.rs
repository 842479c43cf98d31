//! `lineage bench tools` (T1): a spawn through the delegation tools over MCP vs the same spawn
//! through the control service, in one run.
//!
//! All spawn a one-shot `echo` child (a scripted profile) on node 2 of a top-level session on
//! node 1, one at a time, and wait for its result. The tool paths: a session runs the ACP test
//! agent with `tools = true`, and one prompt (`tool-bench: N spawn_subagent {...}`) makes it
//! call `spawn_subagent` N times over one MCP connection; the agent times each call. Over stdio
//! (profile `delegator` of `lineage dev`'s config: `lineage mcp` -> the node's tools socket ->
//! the session's turn) and over streamable HTTP (`delegator-http`: the node's loopback
//! listener -> the session's turn). The peer: N `spawn` requests to node 1's control service,
//! timed by the bench, for children of the first session. The three alternate in rounds (N/4
//! calls each, four times), so all meet the same machine. What the tools add is the difference.

use std::time::{Duration, Instant};

use lineage_bus::control::ControlError;
use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::SessionId;
use lineage_protocol::agent::AgentSpec;
use lineage_protocol::control::SpawnRequest;
use serde_json::{json, Value};

use super::{internal, scaled, spawn_request, Bench};
use crate::bench::Samples;

/// The profiles of the agents that call the tools (stdio, HTTP), and of the children
/// (`lineage dev` ships all three).
const AGENTS: [(&str, &str); 2] = [("stdio", "delegator"), ("HTTP", "delegator-http")];
const CHILD: &str = "echo";

/// Rounds the two paths alternate in (so both meet the same machine: a drift in load or disk
/// shows in both, not in one).
const ROUNDS: usize = 4;

pub(super) async fn tools(b: &Bench) -> Result<(), ControlError> {
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    let n = scaled(200);
    // n spread over the rounds: 10 is 3, 3, 2, 2.
    let round_size = |r: usize| n / ROUNDS + usize::from(r <= n % ROUNDS);
    let warmup = 10;
    println!("one-shot `{CHILD}` child on {cn} of a top-level session on {pn}, one at a time: through its MCP tools over stdio and over HTTP (timed by the agent) and through the control service (timed here), alternating in {ROUNDS} rounds ({n} each)");
    let args = json!({"profile": CHILD, "prompt": "x", "shape": "one-shot", "node": cn});
    let directive = |k: usize| format!("tool-bench: {k} spawn_subagent {args}");
    let mut sessions = Vec::new();
    for (_, profile) in AGENTS {
        let mut root = spawn_request(None, None, lineage_protocol::script::Script::done(), &pn);
        root.agent = AgentSpec::Profile {
            profile: profile.to_owned(),
        };
        root.prompt = directive(warmup);
        let session = b.ctl.spawn(&pn, &root).await?.session;
        tool_round(b, &session, 0).await?;
        sessions.push(session);
    }
    // The same spawn through the control service, children of the first session.
    let mut child: SpawnRequest = spawn_request(
        Some(&sessions[0]),
        Some(SubagentShape::OneShot),
        lineage_protocol::script::Script::done(),
        &cn,
    );
    child.agent = AgentSpec::Profile {
        profile: CHILD.to_owned(),
    };
    child.prompt = "x".to_owned();
    for _ in 0..warmup {
        b.ctl.spawn(&pn, &child).await?;
    }
    let mut tools: Vec<Samples> = AGENTS
        .iter()
        .map(|_| Samples {
            latencies: Vec::new(),
            wall: Duration::ZERO,
        })
        .collect();
    let mut service = Samples {
        latencies: Vec::new(),
        wall: Duration::ZERO,
    };
    for round in 1..=ROUNDS {
        let per_round = round_size(round);
        if per_round == 0 {
            break;
        }
        for (session, samples) in sessions.iter().zip(tools.iter_mut()) {
            let followup = lineage_protocol::control::FollowupRequest {
                session: session.clone(),
                content: directive(per_round),
                request_id: None,
            };
            b.ctl.control.followup(&followup).await?;
            let micros = tool_round(b, session, round).await?;
            samples.wall += Duration::from_micros(micros.iter().sum());
            samples
                .latencies
                .extend(micros.iter().map(|us| Duration::from_micros(*us)));
        }
        let wall = Instant::now();
        for _ in 0..per_round {
            let started = Instant::now();
            b.ctl.spawn(&pn, &child).await?;
            service.latencies.push(started.elapsed());
        }
        service.wall += wall.elapsed();
    }
    b.report("spawn one-shot via the control service", &service);
    for ((transport, _), samples) in AGENTS.iter().zip(&tools) {
        b.report(
            &format!("spawn one-shot via the MCP tool over {transport}"),
            samples,
        );
    }
    let s = service.p50();
    for ((transport, _), samples) in AGENTS.iter().zip(&tools) {
        let t = samples.p50();
        println!(
            "the tool path over {transport} adds {:+.3} ms at p50 ({:.3} vs {:.3} ms; aim: under 1 ms)",
            (t.as_secs_f64() - s.as_secs_f64()) * 1e3,
            t.as_secs_f64() * 1e3,
            s.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// The timings (µs) of the agent's tool bench in its reply number `nth` (0-based).
async fn tool_round(b: &Bench, session: &SessionId, nth: usize) -> Result<Vec<u64>, ControlError> {
    let reply = agent_reply(b, session, nth).await?;
    let body: Value = reply
        .strip_prefix("tool-bench spawn_subagent: ")
        .and_then(|b| serde_json::from_str(b).ok())
        .ok_or_else(|| internal(format!("the agent's tool bench failed: {reply}")))?;
    if let Some(first) = body["errors"].as_array().and_then(|e| e.first()) {
        return Err(internal(format!(
            "a spawn through the tools failed: {first}"
        )));
    }
    Ok(body["micros"]
        .as_array()
        .map(|m| m.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default())
}

/// The agent's reply number `nth` (0-based), from the session's log (bounded wait).
async fn agent_reply(b: &Bench, session: &SessionId, nth: usize) -> Result<String, ControlError> {
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
            .filter_map(|e| e.data["text"].as_str())
            .nth(nth)
        {
            return Ok(text.to_owned());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(internal(format!(
        "session {session} did not answer its tool bench within 600 s"
    )))
}
