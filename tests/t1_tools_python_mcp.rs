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
    let grant = socket.grant(session, slot);
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
