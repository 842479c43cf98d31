//! The editor's `mcpServers` reach the root agent of its ACP session (issue 38), tried as an
//! editor would: the ACP Python SDK starts `lineage acp --profile NAME` and opens sessions
//! with an HTTP server (with an `Authorization` header) and a stdio one, against real nodes
//! and a real nats-server. With `pass_mcp_servers = true` the hosted agent (the ACP test
//! agent, which takes MCP over HTTP) gets the HTTP server next to lineage's tools and never
//! the stdio one (a program on the editor's machine); a profile without it gets lineage's
//! tools only. The header's value appears in no log: not the session's, not the node's.

use std::process::Command;

use lineage_testkit::binary::lineage_bin;
use lineage_testkit::prelude::Cluster;
use serde_json::Value;

const SECRET: &str = "Bearer editor-s3cret-4711";

const EDITOR: &str = r#"
import asyncio, json, sys
from acp import spawn_agent_process, text_block, PROTOCOL_VERSION
from acp.schema import HttpMcpServer, HttpHeader, McpServerStdio

class Editor:
    def __init__(self):
        self.text = {}
    async def session_update(self, session_id, update, **kwargs):
        if update.session_update == "agent_message_chunk":
            self.text[session_id] = self.text.get(session_id, "") + update.content.text
    async def request_permission(self, *args, **kwargs):
        raise RuntimeError("no permission requests expected")

async def main():
    lineage, nats, cluster, profile, secret = sys.argv[1:6]
    servers = [
        HttpMcpServer(type="http", name="docs", url="https://docs.example.com/mcp",
                      headers=[HttpHeader(name="Authorization", value=secret)]),
        McpServerStdio(name="local-fs", command="/usr/bin/true", args=[], env=[]),
    ]
    editor = Editor()
    args = ["--nats", nats, "--cluster", cluster, "acp", "--profile", profile]
    async with spawn_agent_process(editor, lineage, *args) as (conn, _proc):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = (await conn.new_session(cwd="/tmp", mcp_servers=servers)).session_id
        await conn.prompt(session_id=session, prompt=[text_block("mcp-servers")])
        print(json.dumps({"session": session, "reply": editor.text.get(session, "")}))

asyncio.run(main())
"#;

fn profiles() -> String {
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    format!(
        "[agents.passing]\ndriver = \"acp\"\ncommand = \"{agent}\"\nargs = [\"--mcp-http\"]\ntools = true\nisolation = \"none\"\npass_mcp_servers = true\n\n[agents.keeping]\ndriver = \"acp\"\ncommand = \"{agent}\"\nargs = [\"--mcp-http\"]\ntools = true\nisolation = \"none\"\n",
        agent = agent.display()
    )
}

fn editor(cluster: &Cluster, profile: &str) -> Value {
    let out = Command::new("python3")
        .args(["-c", EDITOR])
        .arg(lineage_bin())
        .arg(cluster.nats.url())
        .arg(&cluster.cluster)
        .args([profile, SECRET])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the editor failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn f1_an_editors_http_mcp_servers_reach_its_root_agent_when_the_profile_passes_them() {
    let acp = Command::new("python3")
        .args(["-c", "import acp"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        acp,
        "the ACP Python SDK is missing: run scripts/install-deps.sh"
    );
    let cluster = Cluster::start_with_toml(1, &[], &profiles());

    let passing = editor(&cluster, "passing");
    let reply = passing["reply"].as_str().unwrap_or_default();
    let lines: Vec<&str> = reply.lines().collect();
    assert_eq!(lines.first(), Some(&"mcp servers:"), "{reply}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("lineage http http://127.0.0.1:")),
        "lineage's tools first: {reply}"
    );
    assert!(
        lines.contains(
            &format!(
                "docs http https://docs.example.com/mcp [Authorization=<{} chars>]",
                SECRET.len()
            )
            .as_str()
        ),
        "the editor's HTTP server with its header: {reply}"
    );
    assert!(!reply.contains("local-fs"), "a stdio server stays: {reply}");

    let keeping = editor(&cluster, "keeping");
    let reply = keeping["reply"].as_str().unwrap_or_default();
    assert!(reply.starts_with("mcp servers:"), "{reply}");
    assert!(reply.contains("lineage http"), "{reply}");
    assert!(
        !reply.contains("docs"),
        "the profile does not pass them: {reply}"
    );

    // The credential was carried, never written down.
    for session in [&passing["session"], &keeping["session"]] {
        let (code, log, _) = cluster.cli(&["logs", "--json", session.as_str().unwrap()]);
        assert_eq!(code, 0, "{log}");
        assert!(
            !log.contains("s3cret"),
            "the session's log holds the secret: {log}"
        );
    }
    let logs = cluster.logs();
    assert!(!logs.contains("s3cret"), "a node logged the secret");
    assert!(
        logs.contains("the editor's MCP servers given to the agent"),
        "the node says what it passed"
    );
}
