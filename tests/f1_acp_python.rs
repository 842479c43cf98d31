//! The ACP front door driven by a client this project did not write (F1, F3; issue 11 part 2):
//! the ACP Python SDK (PyPI `agent-client-protocol`, installed by scripts/install-deps.sh) starts
//! `lineage acp --profile delegator` as an editor does, against a real nats-server and real
//! node processes. It opens a session, prompts it (the reply streams back as several
//! `agent_message_chunk`s), cancels a slow turn (`cancelled`), loads the session on a second
//! connection (its transcript replayed), prompts an unknown session (a one-line error) and
//! closes it (the tree is drained).

use std::process::Command;

use lineage_testkit::binary::{delegator_profiles, lineage_bin};
use lineage_testkit::prelude::Cluster;
use serde_json::Value;

const EDITOR: &str = r#"
import asyncio, json, sys
import acp
from acp import spawn_agent_process, text_block, PROTOCOL_VERSION

class Editor:
    def __init__(self):
        self.updates = []
    async def session_update(self, session_id, update, **kwargs):
        text = getattr(getattr(update, "content", None), "text", None)
        self.updates.append((session_id, update.session_update, text))
    async def request_permission(self, *args, **kwargs):
        raise RuntimeError("no permission requests expected")
    def chunks(self, session, kind):
        return [t for (s, k, t) in self.updates if s == session and k == kind]

async def main():
    lineage, nats, cluster = sys.argv[1], sys.argv[2], sys.argv[3]
    args = ["--nats", nats, "--cluster", cluster, "acp", "--profile", "delegator"]
    out = {}
    first = Editor()
    async with spawn_agent_process(first, lineage, *args) as (conn, _proc):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = (await conn.new_session(cwd="/tmp")).session_id
        out["session"] = session
        answer = await conn.prompt(session_id=session, prompt=[text_block("hello there")])
        out["stop_reason"] = answer.stop_reason
        out["chunks"] = first.chunks(session, "agent_message_chunk")
        slow = asyncio.ensure_future(conn.prompt(session_id=session, prompt=[text_block("slow one")]))
        await asyncio.sleep(1.5)
        await conn.cancel(session_id=session)
        out["cancelled"] = (await asyncio.wait_for(slow, 30)).stop_reason
        try:
            await conn.prompt(session_id="0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", prompt=[text_block("x")])
            out["unknown"] = "accepted"
        except Exception as e:
            out["unknown"] = str(e)
        second = Editor()
        async with spawn_agent_process(second, lineage, *args) as (other, _p2):
            await other.initialize(protocol_version=PROTOCOL_VERSION)
            await other.load_session(cwd="/tmp", session_id=session)
            out["loaded_user"] = second.chunks(session, "user_message_chunk")
            out["loaded_agent"] = second.chunks(session, "agent_message_chunk")
        await conn.close_session(session_id=session)
    print(json.dumps(out))

try:
    asyncio.run(main())
except Exception:
    import traceback
    traceback.print_exc()
    sys.exit(1)
"#;

fn python_acp_installed() {
    let ok = Command::new("python3")
        .args(["-c", "import acp"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the ACP Python SDK is missing: run scripts/install-deps.sh (pip install agent-client-protocol)"
    );
}

/// Runs the editor `script` (python3 -c) against `cluster` with `lineage`, the NATS URL, the
/// cluster's name and `extra` as its arguments; the JSON it printed.
fn run_editor(script: &str, cluster: &Cluster, extra: &[&str]) -> Value {
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(lineage_bin())
        .arg(cluster.nats.url())
        .arg(&cluster.cluster)
        .args(extra)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the editor failed: {stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}

#[test]
fn f1_f3_the_python_acp_sdk_opens_prompts_streams_cancels_loads_and_closes_a_session() {
    python_acp_installed();
    let cluster = Cluster::start_with_toml(1, &[], &delegator_profiles());
    let v = run_editor(EDITOR, &cluster, &[]);
    assert_eq!(v["stop_reason"], "end_turn", "{v}");
    // Streamed: the test agent sends its reply in three chunks, each shown as it came.
    let chunks: Vec<&str> = v["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(chunks.len() >= 3, "{v}");
    assert_eq!(chunks.concat(), "echo: hello there [turn 1]", "{v}");
    assert_eq!(v["cancelled"], "cancelled", "{v}");
    let unknown = v["unknown"].as_str().unwrap();
    assert!(
        unknown.contains("is not open on this connection"),
        "{unknown}"
    );
    // Loaded on another connection: the transcript comes back from the session's log.
    let user: Vec<&str> = v["loaded_user"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(user.iter().any(|t| t.contains("hello there")), "{v}");
    let agent = v["loaded_agent"].as_array().unwrap();
    assert!(
        agent.iter().any(|t| t == "echo: hello there [turn 1]"),
        "{v}"
    );
    // Closed: drained.
    let session = v["session"].as_str().unwrap();
    for row in cluster.tree(session) {
        assert_eq!(row["state"], "disposed", "{row}");
    }
}

/// Issue 38, as an editor tried it with the Python SDK: a child's settlement after `end_turn`
/// wakes no turn (nothing streams until the next prompt), the next prompt's turn takes the
/// notice, `session/cancel` cancels the prompt the editor sees, and `session/load` replays the
/// notice as what it is, never as the user typing it.
const WAKE_EDITOR: &str = r#"
import asyncio, json, sys
from acp import spawn_agent_process, text_block, PROTOCOL_VERSION

class Editor:
    def __init__(self):
        self.updates = []
    async def session_update(self, session_id, update, **kwargs):
        text = getattr(getattr(update, "content", None), "text", None)
        self.updates.append((session_id, update.session_update, text))
    async def request_permission(self, *args, **kwargs):
        raise RuntimeError("no permission requests expected")
    def texts(self, session, kind):
        return [t for (s, k, t) in self.updates if s == session and k == kind and t]

async def main():
    lineage, nats, cluster = sys.argv[1], sys.argv[2], sys.argv[3]
    args = ["--nats", nats, "--cluster", cluster, "acp", "--profile", "delegator"]
    out = {}
    editor = Editor()
    async with spawn_agent_process(editor, lineage, *args) as (conn, _proc):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = (await conn.new_session(cwd="/tmp")).session_id
        out["session"] = session
        spawn = 'tool: spawn_subagent {"profile": "echo", "prompt": "hello child", "shape": "continuable", "label": "kid"}'
        first = await conn.prompt(session_id=session, prompt=[text_block(spawn)])
        out["first"] = first.stop_reason
        ended = len(editor.texts(session, "agent_message_chunk"))
        # The child settles right away; its notice must not start a turn nobody asked for.
        await asyncio.sleep(4)
        out["after_end_turn"] = editor.texts(session, "agent_message_chunk")[ended:]
        # The next prompt takes the notice; a slow one is cancelled: the prompt sees it.
        slow = asyncio.ensure_future(conn.prompt(session_id=session, prompt=[text_block("slow, and what did the kid say?")]))
        await asyncio.sleep(2)
        await conn.cancel(session_id=session)
        out["cancelled"] = (await asyncio.wait_for(slow, 30)).stop_reason
        out["second"] = (await conn.prompt(session_id=session, prompt=[text_block("thanks")])).stop_reason
        out["second_reply"] = "".join(editor.texts(session, "agent_message_chunk")[ended:])
    loaded = Editor()
    async with spawn_agent_process(loaded, lineage, *args) as (other, _p2):
        await other.initialize(protocol_version=PROTOCOL_VERSION)
        await other.load_session(cwd="/tmp", session_id=session)
        out["loaded_user"] = loaded.texts(session, "user_message_chunk")
    print(json.dumps(out))

try:
    asyncio.run(main())
except Exception:
    import traceback
    traceback.print_exc()
    sys.exit(1)
"#;

#[test]
fn f1_a_childs_settlement_after_end_turn_waits_for_the_next_prompt_in_the_python_sdk() {
    python_acp_installed();
    let cluster = Cluster::start_with_toml(1, &[], &delegator_profiles());
    let v = run_editor(WAKE_EDITOR, &cluster, &[]);
    assert_eq!(v["first"], "end_turn", "{v}");
    assert_eq!(
        v["after_end_turn"],
        serde_json::json!([]),
        "nothing streams after end_turn: {v}"
    );
    assert_eq!(
        v["cancelled"], "cancelled",
        "the cancel hit the prompt's turn: {v}"
    );
    assert_eq!(v["second"], "end_turn", "{v}");
    // The settled kid's notice was in a prompt's turn: the slow one (cancelled) or the next.
    let session = v["session"].as_str().unwrap();
    let log = cluster.log(session);
    let notice = log
        .iter()
        .find(|e| e.kind == "inbox/accepted" && e.data["message"]["kind"] == "subagent-settled")
        .unwrap_or_else(|| panic!("the kid's notice is accepted: {log:?}"));
    assert_eq!(notice.data["wake"], false, "accepted quietly");
    // Replayed as the kid's, never as the user's words.
    let user: Vec<&str> = v["loaded_user"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    assert!(user.iter().any(|t| t.contains("spawn_subagent")), "{v}");
    assert!(
        !user
            .iter()
            .any(|t| t.contains("settled") || t.contains("completed:")),
        "a notice is not a user message: {v}"
    );
}

/// Issue 38: the editor's directory, mapped with `lineage acp --map-cwd DIR` under the profile's
/// working directory (a tree the nodes have there), or refused in one line.
const MAPPED_EDITOR: &str = r#"
import asyncio, json, sys
from acp import spawn_agent_process, text_block, PROTOCOL_VERSION

class Editor:
    def __init__(self):
        self.texts = []
    async def session_update(self, session_id, update, **kwargs):
        text = getattr(getattr(update, "content", None), "text", None)
        if update.session_update == "agent_message_chunk" and text:
            self.texts.append(text)
    async def request_permission(self, *args, **kwargs):
        raise RuntimeError("no permission requests expected")

async def main():
    lineage, nats, cluster, root = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    args = ["--nats", nats, "--cluster", cluster, "acp", "--profile", "mapped", "--map-cwd", root]
    out = {}
    editor = Editor()
    async with spawn_agent_process(editor, lineage, *args) as (conn, _proc):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = (await conn.new_session(cwd=root + "/app")).session_id
        await conn.prompt(session_id=session, prompt=[text_block("sh: pwd")])
        out["pwd"] = "".join(editor.texts)
        try:
            await conn.new_session(cwd="/somewhere/else")
            out["outside"] = "accepted"
        except Exception as e:
            out["outside"] = str(e)
        try:
            await conn.new_session(cwd=root + "/escape")
            out["escape"] = "accepted"
        except Exception as e:
            out["escape"] = str(e)
    print(json.dumps(out))

try:
    asyncio.run(main())
except Exception:
    import traceback
    traceback.print_exc()
    sys.exit(1)
"#;

#[test]
fn f1_an_editors_directory_is_mapped_under_the_profiles_workdir_or_refused() {
    python_acp_installed();
    let workdir = tempfile::tempdir().unwrap();
    std::fs::create_dir(workdir.path().join("app")).unwrap();
    // A link out of the working directory is no way out.
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), workdir.path().join("escape")).unwrap();
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    let profile = format!(
        "[agents.mapped]\ndriver = \"acp\"\ncommand = \"{}\"\nworkdir = \"{}\"\nisolation = \"none\"\n",
        agent.display(),
        workdir.path().display()
    );
    let cluster = Cluster::start_with_toml(1, &[], &profile);
    let before = 0;
    let editor_root = "/home/someone/src";
    let v = run_editor(MAPPED_EDITOR, &cluster, &[editor_root]);
    let expected = workdir.path().join("app");
    assert!(
        v["pwd"]
            .as_str()
            .unwrap_or_default()
            .contains(&expected.display().to_string()),
        "the agent runs in <workdir>/app: {v}"
    );
    let outside = v["outside"].as_str().unwrap_or_default();
    assert!(
        outside.contains("is not under --map-cwd /home/someone/src"),
        "{v}"
    );
    let escape = v["escape"].as_str().unwrap_or_default();
    assert!(
        escape.contains("leads out of the profile's working directory"),
        "{v}"
    );
    let live = |c: &Cluster| {
        c.cli_json(&["ls", "--all"])["sessions"]
            .as_array()
            .map_or(0, |s| s.iter().filter(|r| r["state"] != "disposed").count())
    };
    assert_eq!(
        live(&cluster),
        before + 1,
        "the refused session/new spawned nothing, the failed one left nothing alive"
    );
}
