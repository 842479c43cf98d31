//! C2, C4 (issue 32, item 4): a root opened through an editor asks the editor. The ACP Python
//! SDK (a client this project did not write) starts `lineage acp --profile delegator` as an
//! editor does; the root's agent (the ACP test agent, hosted by a real node) asks permission
//! for a tool call, which reaches the editor as `session/request_permission` with the agent's
//! title and options, and the option the person picks is the agent's answer; a dismissal is a
//! refusal. A delegated child of that root never reaches the editor: lineage's rule refuses
//! its request. Real nats-server, real node.

use std::process::Command;

use lineage_testkit::binary::{delegator_profiles, lineage_bin};
use lineage_testkit::prelude::Cluster;
use serde_json::Value;

const EDITOR: &str = r#"
import asyncio, json, sys
from acp import spawn_agent_process, text_block, PROTOCOL_VERSION
from acp.schema import RequestPermissionResponse, AllowedOutcome, DeniedOutcome

class Editor:
    def __init__(self):
        self.asked = []
        self.texts = []
    async def session_update(self, session_id, update, **kwargs):
        text = getattr(getattr(update, "content", None), "text", None)
        if update.session_update == "agent_message_chunk" and text:
            self.texts.append(text)
    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.asked.append({"session": session_id, "title": tool_call.title,
                           "options": [o.option_id for o in options]})
        if tool_call.title == "Bash":
            allow = [o.option_id for o in options if o.kind == "allow_once"][0]
            return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=allow))
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

async def main():
    lineage, nats, cluster = sys.argv[1], sys.argv[2], sys.argv[3]
    args = ["--nats", nats, "--cluster", cluster, "acp", "--profile", "delegator"]
    out = {}
    editor = Editor()
    async with spawn_agent_process(editor, lineage, *args) as (conn, _proc):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = (await conn.new_session(cwd="/tmp")).session_id
        out["session"] = session
        for key, prompt in [
            ("allowed", "ask tool:Bash"),
            ("dismissed", "ask tool:rm"),
            ("child", 'tool: spawn_subagent {"profile": "delegator", "prompt": "ask tool:Bash", "shape": "one-shot", "label": "kid"}'),
        ]:
            editor.texts = []
            answer = await asyncio.wait_for(conn.prompt(session_id=session, prompt=[text_block(prompt)]), 120)
            out[key] = {"stop": answer.stop_reason, "text": "".join(editor.texts)}
        out["asked"] = editor.asked
        await conn.close_session(session_id=session)
    print(json.dumps(out))

try:
    asyncio.run(main())
except Exception:
    import traceback
    traceback.print_exc()
    sys.exit(1)
"#;

#[test]
fn c4_a_root_asks_its_editor_and_a_delegated_child_never_does() {
    let installed = Command::new("python3")
        .args(["-c", "import acp"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        installed,
        "the ACP Python SDK is missing: run scripts/install-deps.sh (pip install agent-client-protocol)"
    );
    let cluster = Cluster::start_with_toml(1, &[], &delegator_profiles());
    let out = Command::new("python3")
        .args(["-c", EDITOR])
        .arg(lineage_bin())
        .arg(cluster.nats.url())
        .arg(&cluster.cluster)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the editor failed: {stderr}");
    let v: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    // The person allowed: the agent got the option picked.
    let allowed = v["allowed"]["text"].as_str().unwrap();
    assert!(allowed.ends_with("[permission: selected allow]"), "{v}");
    // The person dismissed: a refusal.
    let dismissed = v["dismissed"]["text"].as_str().unwrap();
    assert!(dismissed.ends_with("[permission: selected reject]"), "{v}");
    // The child's request never reached the editor; lineage's rule refused it.
    let child = v["child"]["text"].as_str().unwrap();
    assert!(child.contains("[permission: selected reject]"), "{v}");
    let asked = v["asked"].as_array().unwrap();
    let titles: Vec<&str> = asked.iter().map(|a| a["title"].as_str().unwrap()).collect();
    assert_eq!(titles, ["Bash", "rm"], "{v}");
    for a in asked {
        assert_eq!(a["session"], v["session"], "{v}");
        assert_eq!(a["options"], serde_json::json!(["allow", "reject"]), "{v}");
    }
}
