//! The A2A front door (issue 38, A1) driven by a client this project did not write: the
//! official Python `a2a-sdk` (tests/a2a/client.py) against `lineage a2a` in front of real node
//! processes and a real nats-server. Cards, send, follow-up, a retried message, streaming,
//! get, list by context, a task's children as its lineage, cancel (a drain), the bearer check
//! failing closed, malformed requests refused without a change; and a task that outlives the
//! node hosting it and the gateway serving its stream.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Stdio};

use lineage_testkit::binary::{delegator_profiles, lineage_bin};
use lineage_testkit::prelude::Cluster;
use serde_json::Value;

mod a2a;
use a2a::{client, ok, python_a2a_installed, refused, replies, run, sent_task, Gateway, TOKEN};

/// Profiles: `helper` (the ACP test agent) and `planner` (with lineage's tools) are A2A
/// agents; `delegator` and `echo` are not.
fn profiles() -> String {
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    format!(
        "{}\n[agents.helper]\ndriver = \"acp\"\ncommand = \"{agent}\"\na2a = true\ndescription = \"echoes what it is told\"\n\n[agents.planner]\ndriver = \"acp\"\ncommand = \"{agent}\"\ntools = true\na2a = true\ndescription = \"delegates with lineage's tools\"\n",
        delegator_profiles(),
        agent = agent.display()
    )
}

fn ls_count(c: &Cluster) -> usize {
    c.cli_json(&["ls", "--all"])["sessions"]
        .as_array()
        .map_or(0, Vec::len)
}

#[test]
fn a1_the_python_a2a_sdk_sends_streams_gets_lists_and_cancels_tasks() {
    python_a2a_installed();
    let c = Cluster::start_with_toml(3, &[], &profiles());
    let g = Gateway::start(&c);
    let helper = g.url("helper");
    // Cards: the A2A profiles only, each with its skill and the bearer scheme.
    let (code, index) = lineage_testkit::http_get(g.port, "/agents").expect("GET /agents");
    assert_eq!(code, 200);
    assert!(
        index.contains("helper") && index.contains("planner"),
        "{index}"
    );
    assert!(!index.contains("\"echo\""), "not marked a2a: {index}");
    let (code, card) =
        lineage_testkit::http_get(g.port, "/agents/helper/.well-known/agent-card.json").unwrap();
    assert_eq!(code, 200);
    let card: Value = serde_json::from_str(&card).unwrap();
    assert_eq!(card["skills"][0]["description"], "echoes what it is told");
    assert!(card["securitySchemes"]["bearer"].is_object(), "{card}");

    // Send: a new task, answered when its turn ended; the context is the task's root.
    let mid = uuid_like(1);
    let first = ok(&["send", &helper, TOKEN, "hello there", "--mid", &mid]);
    let task = sent_task(&first);
    let id = task["id"].as_str().unwrap().to_owned();
    assert_eq!(task["contextId"], id.as_str(), "a root is its own context");
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{task}"
    );
    assert_eq!(replies(task), ["echo: hello there [turn 1]"], "{task}");
    // The same message again (a retry): the same task, no second turn.
    let again = ok(&["send", &helper, TOKEN, "hello there", "--mid", &mid]);
    assert_eq!(sent_task(&again)["id"], id.as_str());
    assert_eq!(replies(sent_task(&again)).len(), 1, "{again}");
    // A follow-up on the task: its next turn.
    let follow = ok(&["send", &helper, TOKEN, "and again", "--task", &id]);
    assert_eq!(
        replies(sent_task(&follow)),
        ["echo: hello there [turn 1]", "echo: and again [turn 2]"]
    );

    // Streaming: the task, `working`, the reply as an artifact, then `input-required`.
    let (code, events) = run(&["stream", &helper, TOKEN, "streamed"]);
    assert_eq!(code, 0, "{events:?}");
    let kinds: Vec<String> = events.iter().map(|e| event_kind(&e["event"])).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("task"), "{kinds:?}");
    let at_first = events[0]["event"]["task"]["status"]["state"]
        .as_str()
        .unwrap();
    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"].contains(&at_first),
        "the task as it was when the stream began: {events:?}"
    );
    // The reply comes as an artifact update, or already in the task the stream began with
    // (a turn that ended before the stream's first read of the log).
    let artifact = events
        .iter()
        .find_map(|e| {
            e["event"]["artifactUpdate"]["artifact"]["parts"][0]["text"]
                .as_str()
                .or_else(|| e["event"]["task"]["artifacts"][0]["parts"][0]["text"].as_str())
        })
        .unwrap_or_else(|| panic!("no artifact: {events:?}"));
    assert_eq!(artifact, "echo: streamed [turn 1]");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("statusUpdate:TASK_STATE_INPUT_REQUIRED"),
        "{kinds:?}"
    );

    // A task's children are its lineage: a child task in the same context, in the metadata.
    let planner = g.url("planner");
    let spawn = r#"tool: spawn_subagent {"profile": "echo", "prompt": "hello child", "shape": "continuable", "label": "kid"}"#;
    let parent = ok(&["send", &planner, TOKEN, spawn]);
    let root = sent_task(&parent)["id"].as_str().unwrap().to_owned();
    let tree = ok(&["get", &planner, TOKEN, &root]);
    let children = tree["task"]["metadata"]["lineage"]["children"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(children.len(), 1, "{tree}");
    assert_eq!(children[0]["label"], "kid");
    let kid = children[0]["session"].as_str().unwrap().to_owned();
    let kid_task = ok(&["get", &planner, TOKEN, &kid]);
    assert_eq!(kid_task["task"]["contextId"], root.as_str(), "{kid_task}");
    let listed = ok(&["list", &planner, TOKEN, "--context", &root]);
    let ids: Vec<&str> = listed["list"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    assert!(ids.contains(&root.as_str()) && ids.contains(&kid.as_str()));
    let line = refused(&["send", &planner, TOKEN, "psst", "--task", &kid]);
    assert!(line.contains("send messages to its root task"), "{line}");

    // Each agent its own tasks: the roots of its profile, and messages to them only.
    let mine = ok(&["list", &helper, TOKEN]);
    let roots: Vec<&str> = mine["list"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(roots.contains(&id.as_str()), "{mine}");
    assert!(
        !roots.contains(&root.as_str()),
        "a planner task is not helper's: {mine}"
    );
    let line = refused(&["send", &helper, TOKEN, "psst", "--task", &root]);
    assert!(line.contains("is not a task of agent helper"), "{line}");

    // Cancel drains the tree, children first: canceled, and terminal.
    let canceled = ok(&["cancel", &planner, TOKEN, &root]);
    assert_eq!(
        canceled["task"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    for row in c.tree(&root) {
        assert_eq!(row["state"], "disposed", "{row}");
    }
    let line = refused(&["cancel", &planner, TOKEN, &root]);
    assert!(line.contains("nothing to cancel"), "{line}");
    let line = refused(&["send", &planner, TOKEN, "more", "--task", &root]);
    assert!(line.contains("takes no more messages"), "{line}");

    // Auth fails closed; bad input is one line and changes nothing.
    let before = ls_count(&c);
    let line = refused(&["send", &helper, "-", "no token"]);
    assert!(line.contains("401"), "{line}");
    let line = refused(&["send", &helper, "wrong-token", "bad token"]);
    assert!(line.contains("401"), "{line}");
    for (body, code, says) in [
        ("{not json", -32700, "parse error"),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"Nope","params":{}}"#,
            -32601,
            "",
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{"message":{"messageId":"m-1","role":"ROLE_USER","parts":[{"url":"file:///etc/passwd"}]}}}"#,
            -32005,
            "not text",
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":{"message":{"messageId":"has spaces!","role":"ROLE_USER","parts":[{"text":"x"}]}}}"#,
            -32602,
            "messageId",
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"SendMessage","params":{"message":{"messageId":"m-2","role":"ROLE_AGENT","parts":[{"text":"x"}]}}}"#,
            -32602,
            "ROLE_USER",
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"GetTask","params":{"id":"not-a-task"}}"#,
            -32001,
            "not found",
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"SendMessage","params":{"message":{"messageId":"m-3","role":"ROLE_USER","contextId":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","parts":[{"text":"x"}]}}}"#,
            -32001,
            "not found",
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"CreateTaskPushNotificationConfig","params":{"taskId":"x","url":"http://127.0.0.1:9/"}}"#,
            -32602,
            "--push-allow-private",
        ),
    ] {
        let reply = ok(&["raw", &helper, TOKEN, body]);
        let error = &reply["body"]["error"];
        assert_eq!(error["code"], code, "{body}: {reply}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {message}");
        assert!(!message.contains('\n'), "one line: {message}");
    }
    assert_eq!(ls_count(&c), before, "refused requests changed nothing");
}

/// The kind of a stream event: `task`, `artifactUpdate`, or `statusUpdate:<state>`.
fn event_kind(event: &Value) -> String {
    if let Some(s) = event.get("statusUpdate") {
        return format!(
            "statusUpdate:{}",
            s["status"]["state"].as_str().unwrap_or("?")
        );
    }
    event
        .as_object()
        .and_then(|o| o.keys().next().cloned())
        .unwrap_or_default()
}

/// A message id of the client's choosing.
fn uuid_like(n: u32) -> String {
    format!("0193a1b2-c3d4-7e5f-8a9b-{n:012}")
}

/// A streaming client, its lines read as they come.
struct Streaming {
    child: Child,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl Streaming {
    fn start(args: &[&str]) -> Streaming {
        let mut child = client()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run tests/a2a/client.py");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Streaming { child, lines }
    }

    /// Reads until the task is working (its snapshot says so, or an update): its id.
    fn until_working(&mut self) -> String {
        let first = self.next();
        let task = &first["event"]["task"];
        let id = task["id"]
            .as_str()
            .expect("a stream begins with the task")
            .to_owned();
        let mut working = task["status"]["state"] == "TASK_STATE_WORKING";
        // Bounded: a turn's start is among the first few events.
        for _ in 0..10 {
            if working {
                return id;
            }
            working = event_kind(&self.next()["event"]) == "statusUpdate:TASK_STATE_WORKING";
        }
        panic!("task {id} did not start working");
    }

    /// The next event (panics at the end of the stream).
    fn next(&mut self) -> Value {
        let line = self.lines.next().expect("a stream event").expect("read");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a1_a_task_outlives_the_node_hosting_it_and_the_gateway_serving_its_stream() {
    python_a2a_installed();
    let mut c = Cluster::start_with_toml(
        3,
        &[("LINEAGE_LEASE__TAKEOVER_AFTER_MS", "500")],
        &profiles(),
    );
    let a = Gateway::start(&c);
    let b = Gateway::start(&c);
    // A task mid-turn on some node; that node dies.
    let mut stream = Streaming::start(&["stream", &a.url("helper"), TOKEN, "slow work"]);
    let id = stream.until_working();
    let task = ok(&["get", &b.url("helper"), TOKEN, &id]);
    let node = task["task"]["metadata"]["lineage"]["node"]
        .as_str()
        .unwrap()
        .to_owned();
    let index: usize = node.trim_start_matches("node-").parse::<usize>().unwrap() - 1;
    c.nodes[index].kill();
    // The stream goes on: the cut-short turn ends (interrupted: the task takes messages).
    let ended = loop {
        let e = stream.next();
        if event_kind(&e["event"]).starts_with("statusUpdate:TASK_STATE_INPUT") {
            break e;
        }
    };
    assert_eq!(ended["event"]["statusUpdate"]["taskId"], id.as_str());
    drop(stream);
    // A follow-up is answered by a node that lives (the session cold-resumed there).
    let after = ok(&[
        "send",
        &b.url("helper"),
        TOKEN,
        "after the loss",
        "--task",
        &id,
    ]);
    let task = sent_task(&after);
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{after}"
    );
    assert!(
        replies(task)
            .iter()
            .any(|r| r.starts_with("echo: ") && r.contains("after the loss")),
        "{after}"
    );
    let now_on = task["metadata"]["lineage"]["node"].as_str().unwrap();
    assert_ne!(now_on, node, "resumed elsewhere: {after}");

    // A stream whose gateway dies: the client subscribes again at another gateway and sees the
    // turn through.
    let mut stream = Streaming::start(&[
        "stream",
        &a.url("helper"),
        TOKEN,
        "slow again",
        "--task",
        &id,
    ]);
    stream.until_working();
    drop(a);
    drop(stream);
    let (code, events) = run(&["subscribe", &b.url("helper"), TOKEN, &id]);
    assert_eq!(code, 0, "{events:?}");
    assert_eq!(event_kind(&events[0]["event"]), "task", "{events:?}");
    assert_eq!(
        events[0]["event"]["task"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    let texts: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert!(texts.iter().any(|t| t.contains("slow again")), "{events:?}");
    assert_eq!(
        event_kind(&events.last().unwrap()["event"]),
        "statusUpdate:TASK_STATE_INPUT_REQUIRED"
    );
}

#[test]
fn a1_the_readme_shows_the_a2a_example_it_runs() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/");
    let readme = std::fs::read_to_string(format!("{root}README.md")).unwrap();
    let example = std::fs::read_to_string(format!("{root}examples/a2a_hello.py")).unwrap();
    let shown = readme
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README's A2A section shows a ```python block");
    assert_eq!(
        shown, example,
        "README's python block and examples/a2a_hello.py differ: copy the file into the block"
    );
}
