//! lineage's delegation tools through `lineage mcp`, called by an MCP client this project did
//! not write (T1, T5): the official Python MCP SDK (PyPI `mcp`, installed by
//! scripts/install-deps.sh) starts `lineage mcp` as a stdio server, as a hosted agent does from
//! its `mcpServers`, lists the tools with their schemas and spawns a child through them. The
//! node's side is the real tools socket (`lineage_drivers::tools::socket`); the session's turn
//! is this test's (it answers the action the call became). A secret that names no session is
//! refused by the socket, in one line, and nothing is served.

use std::process::Command;

use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::SessionId;
use lineage_drivers::driver::{ActionOutcome, AgentSpec, TurnAction, TurnCtx};
use lineage_drivers::tools::socket::ToolsSocket;
use lineage_drivers::tools::TurnSlot;
use lineage_protocol::control::OneShotResult;
use lineage_testkit::binary::lineage_bin;
use serde_json::Value;

const CLIENT: &str = r#"
import asyncio, json, os, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            spawn = [t for t in tools.tools if t.name == "spawn_subagent"][0]
            result = await session.call_tool("spawn_subagent", {
                "profile": "researcher", "prompt": "find x", "shape": "one-shot", "label": "finder"})
            print(json.dumps({
                "tools": sorted(t.name for t in tools.tools),
                "spawn_required": sorted(spawn.input_schema.get("required", [])),
                "is_error": result.is_error,
                "text": "".join(c.text for c in result.content if c.type == "text"),
            }))

asyncio.run(main())
"#;

/// The same client over streamable HTTP, with the grant's URL and headers (argv 1, 2: JSON).
const HTTP_CLIENT: &str = r#"
import asyncio, json, sys
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    url, headers = sys.argv[1], json.loads(sys.argv[2])
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                tools = await session.list_tools()
                result = await session.call_tool("spawn_subagent", {
                    "profile": "researcher", "prompt": "find y", "shape": "one-shot"})
                print(json.dumps({
                    "tools": sorted(t.name for t in tools.tools),
                    "is_error": result.is_error,
                    "text": "".join(c.text for c in result.content if c.type == "text"),
                }))

asyncio.run(main())
"#;

/// A raw `initialize` POST with `authorization` (or none): the status line and the body.
fn raw_post(addr: &str, authorization: Option<&str>) -> (String, String) {
    use std::io::{Read, Write};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"forger","version":"0"}}}"#;
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

#[test]
fn t1_t5_the_python_mcp_sdk_calls_the_tools_over_streamable_http_with_the_grants_bearer() {
    python_mcp_installed();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut socket, _serving) = rt
        .block_on(async { ToolsSocket::bind(dir.path()) })
        .unwrap();
    let _http = rt
        .block_on(async { socket.serve_http("127.0.0.1:0".parse().unwrap()) })
        .unwrap();
    let session = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000011").unwrap();
    let child = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000012").unwrap();
    let (ctx, mut requests) = TurnCtx::channel();
    let slot = TurnSlot::default();
    slot.set(ctx);
    let grant = socket.grant(session, slot, true);
    let entry = grant.http().expect("the grant carries the HTTP entry");
    assert!(entry.url.starts_with("http://127.0.0.1:"), "{entry:?}");
    let answered = rt.spawn({
        let child = child.clone();
        async move {
            let request = requests.recv().await.expect("the call reached the turn");
            let _ = request.reply.send(ActionOutcome::Born {
                child,
                result: Some(OneShotResult {
                    output: Some("y is 7".into()),
                    structured: None,
                    stop_reason: lineage_core::messages::StopReason::Completed,
                    changes: None,
                }),
            });
            request.action
        }
    });
    let headers: serde_json::Map<String, Value> = entry
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let out = Command::new("python3")
        .args(["-c", HTTP_CLIENT, &entry.url])
        .arg(Value::Object(headers).to_string())
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python MCP client over HTTP failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(
        report["tools"].as_array().map(Vec::len),
        Some(lineage_drivers::tools::TOOL_NAMES.len()),
        "{report}"
    );
    assert_eq!(report["is_error"], false, "{report}");
    let body: Value = serde_json::from_str(report["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["child"], child.to_string());
    assert_eq!(body["output"], "y is 7");
    let TurnAction::Spawn(spec) = rt.block_on(answered).unwrap() else {
        panic!("not a spawn")
    };
    assert_eq!(spec.prompt, "find y");

    // Without the secret, or with another one, or once revoked: 401 in one line, no MCP.
    let addr = entry
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let forged = format!("Bearer {}", "0".repeat(64));
    for authorization in [None, Some(forged.as_str())] {
        let (status, body) = raw_post(&addr, authorization);
        assert!(status.contains("401"), "{authorization:?}: {status}");
        assert_eq!(
            body.trim(),
            lineage_drivers::tools::http::REFUSED_HTTP,
            "{authorization:?}"
        );
    }
    let granted = entry.headers[0].1.clone();
    // Issue 32, item 2: a plain JSON answer, or SSE events that each carry a JSON-RPC message
    // (rmcp's priming event, `data:` empty with `id: 0`, made Gemini CLI list no tool).
    let (status, body) = raw_post(&addr, Some(&granted));
    assert!(status.contains("200"), "granted initialize: {status}");
    let body = body.trim();
    if !body.starts_with('{') {
        let events: Vec<&str> = body
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .collect();
        assert!(!events.is_empty(), "no event in {body:?}");
        for event in events {
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .collect();
            assert!(
                data.starts_with('{'),
                "an SSE event without a JSON-RPC message (priming?): {event:?} in {body:?}"
            );
        }
    }
    drop(grant);
    let (status, body) = raw_post(&addr, Some(&granted));
    assert!(status.contains("401"), "revoked: {status}");
    assert_eq!(body.trim(), lineage_drivers::tools::http::REFUSED_HTTP);
}

fn python_mcp_installed() {
    let ok = Command::new("python3")
        .args(["-c", "import mcp"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the Python MCP SDK is missing: run scripts/install-deps.sh (pip install mcp)"
    );
}

#[test]
fn t1_t5_the_python_mcp_sdk_lists_the_tools_and_spawns_through_lineage_mcp() {
    python_mcp_installed();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (socket, _serving) = rt
        .block_on(async { ToolsSocket::bind(dir.path()) })
        .unwrap();
    let session = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap();
    let child = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000002").unwrap();
    let (ctx, mut requests) = TurnCtx::channel();
    let slot = TurnSlot::default();
    slot.set(ctx);
    let grant = socket.grant(session, slot, false);
    // V1: the python client and the `lineage mcp` it starts descend from this test.
    grant.bind(lineage_drivers::sandbox::Confinement::Tree {
        leader: std::process::id() as i32,
    });
    // The turn: answers the one action the call becomes, and hands it back.
    let answered = rt.spawn({
        let child = child.clone();
        async move {
            let request = requests.recv().await.expect("the call reached the turn");
            let _ = request.reply.send(ActionOutcome::Born {
                child,
                result: Some(OneShotResult {
                    output: Some("x is 42".into()),
                    structured: None,
                    stop_reason: lineage_core::messages::StopReason::Completed,
                    changes: None,
                }),
            });
            request.action
        }
    });
    let out = Command::new("python3")
        .args(["-c", CLIENT])
        .arg(lineage_bin())
        .envs(grant.env())
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(
        report["tools"],
        serde_json::json!([
            "apply_child_changes",
            "interrupt_child",
            "list_children",
            "report_to_parent",
            "send_to_child",
            "spawn_subagent",
            "wait_for_children"
        ])
    );
    assert_eq!(
        report["spawn_required"],
        serde_json::json!(["profile", "prompt", "shape"])
    );
    assert_eq!(report["is_error"], false);
    let body: Value = serde_json::from_str(report["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["child"], child.to_string());
    assert_eq!(body["output"], "x is 42");
    let action = rt.block_on(answered).unwrap();
    let TurnAction::Spawn(spec) = action else {
        panic!("{action:?}")
    };
    assert_eq!(spec.shape, SubagentShape::OneShot);
    assert_eq!(
        spec.agent,
        AgentSpec::Profile {
            profile: "researcher".into()
        }
    );
    assert_eq!(spec.label.as_deref(), Some("finder"));

    // Another agent on the node without the secret: refused in one line, nothing served.
    let forged = Command::new(lineage_bin())
        .arg("mcp")
        .env("LINEAGE_MCP_SOCKET", socket.path())
        .env("LINEAGE_MCP_SECRET", "0".repeat(64))
        .output()
        .expect("run lineage mcp");
    assert_eq!(forged.status.code(), Some(4), "refused: {forged:?}");
    let err = String::from_utf8_lossy(&forged.stderr);
    assert!(err.contains(lineage_protocol::tools::REFUSED_LINE), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(forged.stdout.is_empty(), "nothing served: {forged:?}");
    // A revoked grant is refused too.
    let env = grant.env();
    drop(grant);
    let revoked = Command::new(lineage_bin())
        .arg("mcp")
        .envs(env)
        .output()
        .expect("run lineage mcp");
    assert_eq!(revoked.status.code(), Some(4), "{revoked:?}");
}
