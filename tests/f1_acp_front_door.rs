//! The ACP front door (F1–F3; issue 11 part 2), with a real nats-server and three real node
//! processes: `lineage acp --profile delegator` on stdio, driven by the agent-client-protocol
//! crate's *client* (as an editor), declaring the `subagents` capability. The root (the ACP
//! test agent, tools on) spawns a continuable child on another node through its MCP tools; the
//! client sees the child announced before any of its traffic, the child's text under its own
//! session id, the root's text streamed; a second connection loads the tree back; closing the
//! session drains it.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, CloseSessionRequest, ContentBlock, ContentChunk,
    InitializeRequest, LoadSessionRequest, NewSessionRequest, PromptRequest, SessionNotification,
    SessionUpdate, StopReason, SubagentCapabilities,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, ByteStreams, Client};
use lineage_testkit::binary::{delegator_profiles, lineage_bin};
use lineage_testkit::prelude::Cluster;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// One editor connection to a `lineage acp` process.
struct Editor {
    cx: ConnectionTo<Agent>,
    seen: Arc<Mutex<Vec<SessionNotification>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
    process: tokio::process::Child,
}

impl Editor {
    async fn open(cluster: &Cluster, subagents: bool) -> Editor {
        Self::open_with(cluster, subagents, &[]).await
    }

    /// [`Editor::open`] with more `lineage acp` flags.
    async fn open_with(cluster: &Cluster, subagents: bool, flags: &[&str]) -> Editor {
        let mut process = tokio::process::Command::new(lineage_bin())
            .args(["--nats", &cluster.nats.url(), "--cluster", &cluster.cluster])
            .args(["acp", "--profile", "delegator", "--turn-timeout-s", "60"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start lineage acp");
        let stdin = process.stdin.take().unwrap();
        let stdout = process.stdout.take().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (cx_tx, cx_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let record = seen.clone();
        let connection = Client
            .v1()
            .name("test-editor")
            .on_receive_notification(
                async move |n: SessionNotification, _cx| {
                    record.lock().unwrap().push(n);
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .connect_with(
                ByteStreams::new(stdin.compat_write(), stdout.compat()),
                async move |cx: ConnectionTo<Agent>| {
                    drop(cx_tx.send(cx));
                    drop(stop_rx.await);
                    Ok(())
                },
            );
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let cx = cx_rx.await.expect("connected");
        let mut caps = ClientCapabilities::new();
        if subagents {
            caps = caps.subagents(SubagentCapabilities::new());
        }
        let init = cx
            .send_request(InitializeRequest::new(ProtocolVersion::V1).client_capabilities(caps))
            .block_task()
            .await
            .expect("initialize");
        assert!(init.agent_capabilities.load_session);
        Editor {
            cx,
            seen,
            _stop: stop_tx,
            process,
        }
    }

    fn seen(&self) -> Vec<SessionNotification> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits up to 30 s for `what` to hold of what was seen.
    async fn wait(&self, what: &str, ok: impl Fn(&[SessionNotification]) -> bool) {
        for _ in 0..300 {
            if ok(&self.seen()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{what}: not seen within 30 s; seen: {:#?}", self.seen());
    }
}

/// The agent text shown in `session`, joined.
fn text_in(seen: &[SessionNotification], session: &str, agent: bool) -> String {
    seen.iter()
        .filter(|n| n.session_id.to_string() == session)
        .filter_map(|n| match (&n.update, agent) {
            (SessionUpdate::AgentMessageChunk(ContentChunk { content, .. }), true)
            | (SessionUpdate::UserMessageChunk(ContentChunk { content, .. }), false) => {
                match content {
                    ContentBlock::Text(t) => Some(t.text.clone()),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect()
}

/// The subagents announced on `parent`'s session: (child id, title) of each first update.
fn announced(seen: &[SessionNotification], parent: &str) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for n in seen.iter().filter(|n| n.session_id.to_string() == parent) {
        if let SessionUpdate::SubagentUpdate(u) = &n.update {
            let id = u.session_id.to_string();
            if !out.iter().any(|(c, _)| *c == id) {
                let title = serde_json::to_value(u).unwrap()["title"]
                    .as_str()
                    .map(str::to_owned);
                out.push((id, title));
            }
        }
    }
    out
}

/// The states `child` was shown in (its `subagent_update`s with a state), in order.
fn states(seen: &[SessionNotification], child: &str) -> Vec<String> {
    seen.iter()
        .filter_map(|n| match &n.update {
            SessionUpdate::SubagentUpdate(u) if u.session_id.to_string() == child => {
                serde_json::to_value(u).unwrap()["state"]["state"]
                    .as_str()
                    .map(str::to_owned)
            }
            _ => None,
        })
        .collect()
}

/// `session`'s event log, as `lineage --json logs` prints it.
fn log_of(cluster: &Cluster, session: &str) -> Vec<serde_json::Value> {
    let (code, out, err) = cluster.cli(&["--json", "logs", session]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The `inbox/accepted` of a child's settlement notice in `root`'s log, once there is one.
async fn wait_settlement_accepted(cluster: &Cluster, root: &str) -> serde_json::Value {
    for _ in 0..200 {
        let found = log_of(cluster, root).into_iter().find(|e| {
            e["kind"] == "inbox/accepted" && e["data"]["message"]["kind"] == "subagent-settled"
        });
        if let Some(found) = found {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no settlement notice accepted by {root}: {:#?}",
        log_of(cluster, root)
    );
}

fn prompt(session: &str, text: &str) -> PromptRequest {
    PromptRequest::new(
        session.to_owned(),
        vec![ContentBlock::from(text.to_owned())],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_f2_f3_an_editor_opens_a_session_sees_its_subagents_loads_it_back_and_closes_it() {
    let cluster = Cluster::start_with_toml(3, &[], &delegator_profiles());
    let editor = Editor::open(&cluster, true).await;
    let cwd = tempfile::tempdir().unwrap();
    let opened = editor
        .cx
        .send_request(NewSessionRequest::new(cwd.path()))
        .block_task()
        .await
        .expect("session/new");
    let root = opened.session_id.to_string();
    // A top-level lineage session, started idle.
    let tree = cluster.tree(&root);
    assert_eq!(tree.len(), 1, "{tree:?}");

    // F1: a prompt is a followup; the turn's text streams back; the turn's end answers it.
    let spawn = r#"tool: spawn_subagent {"profile": "echo", "prompt": "hello child", "shape": "continuable", "label": "kid", "node": "node-2"}"#;
    let answer = editor
        .cx
        .send_request(prompt(&root, spawn))
        .block_task()
        .await
        .expect("session/prompt");
    assert_eq!(answer.stop_reason, StopReason::EndTurn);
    let said = text_in(&editor.seen(), &root, true);
    assert!(said.starts_with("tool spawn_subagent: "), "{said}");
    // The usage the agent reported with its turn is recorded, and summed over the tree.
    // (The test agent reports 100 tokens and 0.0005 USD per turn.)
    let row = cluster.row(&root, &root);
    let used = row["usage"]["used_tokens"].as_u64().unwrap_or(0);
    assert!(used >= 100 && used.is_multiple_of(100), "{row}");
    assert_eq!(row["subtree_usage"]["used_tokens"], used, "{row}");
    assert_eq!(
        row["subtree_usage"]["cost_micros"]["USD"],
        used * 5,
        "{row}"
    );
    // ... and the editor is told, as the root's `usage_update` at the turn's end.
    editor
        .wait("the root's usage_update", |seen| {
            seen.iter().any(|n| {
                let u = serde_json::to_value(&n.update).unwrap();
                n.session_id.to_string() == root
                    && u["sessionUpdate"] == "usage_update"
                    && u["size"] == 200_000
                    && u["used"].as_u64().is_some_and(|t| t >= 100 && t % 100 == 0)
                    && u["cost"]["currency"] == "USD"
            })
        })
        .await;

    // F2: the child is announced on the root's session, titled by its label, before any of
    // its own traffic; its reply shows under its own session id.
    let kids = announced(&editor.seen(), &root);
    assert_eq!(kids.len(), 1, "{:#?}", editor.seen());
    let (child, title) = kids[0].clone();
    assert_eq!(title.as_deref(), Some("kid"));
    editor
        .wait("the child's reply under its own id", |seen| {
            text_in(seen, &child, true).contains("hello child")
        })
        .await;
    let seen = editor.seen();
    let first_own = seen
        .iter()
        .position(|n| n.session_id.to_string() == child)
        .unwrap();
    let announce = seen
        .iter()
        .position(|n| matches!(&n.update, SessionUpdate::SubagentUpdate(u) if u.session_id.to_string() == child))
        .unwrap();
    assert!(announce < first_own, "announced before its traffic");
    let row = cluster.row(&root, &child);
    assert_eq!(row["node"], "node-2", "{row}");
    // An editor's root takes turns for its prompts only: the kid's settlement notice is
    // accepted quietly and waits for the next prompt (nothing streams after `end_turn`).
    let notice = wait_settlement_accepted(&cluster, &root).await;
    assert_eq!(notice["data"]["wake"], false, "{notice}");

    // session/cancel on a descendant interrupts its turn: a second child (the test agent)
    // takes a slow turn (10 s unless cancelled); cancelled once its turn runs, it goes idle.
    let slow = r#"tool: spawn_subagent {"profile": "delegator", "prompt": "tool: report_to_parent {\"content\": \"found it\", \"delivery\": \"quiet\"}\nslow work", "shape": "continuable", "label": "slowpoke", "node": "node-3"}"#;
    editor
        .cx
        .send_request(prompt(&root, slow))
        .block_task()
        .await
        .expect("the second prompt");
    // ... and the prompt's turn took it, with the prompt.
    let took = log_of(&cluster, &root).into_iter().any(|e| {
        e["kind"] == "turn/start"
            && e["data"]["inputs"]
                .as_array()
                .is_some_and(|i| i.contains(&notice["seq"]))
    });
    assert!(took, "{:#?}", log_of(&cluster, &root));
    let slowpoke = announced(&editor.seen(), &root)
        .into_iter()
        .find(|(_, title)| title.as_deref() == Some("slowpoke"))
        .expect("the slow child is announced")
        .0;
    // Its report (sent before its slow wait) shows in its own session, addressed to the root.
    editor
        .wait("the slow child's report", |seen| {
            seen.iter().any(|n| {
                let u = serde_json::to_value(&n.update).unwrap();
                n.session_id.to_string() == slowpoke
                    && u["sessionUpdate"] == "session_message"
                    && u["senderSessionId"] == slowpoke.as_str()
                    && u["recipientSessionId"] == root.as_str()
                    && u["content"][0]["text"] == "found it"
            })
        })
        .await;
    // Announced running; its turn's start sends no second `running` (a state is sent when it
    // changes, once).
    assert_eq!(states(&editor.seen(), &slowpoke), ["running"]);
    let cancelled_at = std::time::Instant::now();
    editor
        .cx
        .send_notification(CancelNotification::new(slowpoke.clone()))
        .expect("session/cancel");
    editor
        .wait("the slow child idle after its cancel", |seen| {
            states(seen, &slowpoke).last().map(String::as_str) == Some("idle")
        })
        .await;
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(8),
        "idle because of the cancel, not the end of its 10 s wait"
    );

    // F3: another connection loads the root: its transcript and its tree come back.
    let other = Editor::open(&cluster, true).await;
    other
        .cx
        .send_request(LoadSessionRequest::new(root.clone(), cwd.path()))
        .block_task()
        .await
        .expect("session/load");
    let loaded = other.seen();
    assert!(
        text_in(&loaded, &root, false).contains("tool: spawn_subagent"),
        "{loaded:#?}"
    );
    assert!(text_in(&loaded, &root, true).starts_with("tool spawn_subagent: "));
    // A child's settlement notice is replayed as that child's end, not as the user speaking.
    let said = text_in(&loaded, &root, false);
    assert!(!said.contains("subagent kid"), "{said}");
    assert_eq!(
        announced(&loaded, &root),
        vec![
            (child.clone(), Some("kid".into())),
            (slowpoke.clone(), Some("slowpoke".into()))
        ]
    );
    assert!(text_in(&loaded, &child, true).contains("hello child"));
    // Loading a child, or a session that does not exist, is refused in one line.
    let refused = other
        .cx
        .send_request(LoadSessionRequest::new(child.clone(), cwd.path()))
        .block_task()
        .await
        .expect_err("a child is not a root");
    assert!(
        format!("{refused:?}").contains("load the root of its tree"),
        "{refused:?}"
    );

    // Closing the session drains the tree, children first.
    editor
        .cx
        .send_request(CloseSessionRequest::new(root.clone()))
        .block_task()
        .await
        .expect("session/close");
    for row in cluster.tree(&root) {
        assert_eq!(row["state"], "disposed", "{row}");
    }
    drop(other);
    let mut editor = editor;
    let _ = editor.process.start_kill();
}

/// Issue 39: `lineage acp --project` opens each session in a copy of the editor's project (its
/// `cwd` on the editor's machine, `.gitignore` honoured), on whichever node hosts it; a
/// project that cannot be read refuses session/new in one line and opens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_c1_an_editors_project_is_the_sessions_files_with_project() {
    let cluster = Cluster::start_with_toml(1, &[], &delegator_profiles());
    let editor = Editor::open_with(&cluster, false, &["--project"]).await;
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("main.rs"), "fn main() { todo!() }\n").unwrap();
    std::fs::write(project.path().join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir(project.path().join("target")).unwrap();
    std::fs::write(project.path().join("target/out.bin"), "build output").unwrap();
    let opened = editor
        .cx
        .send_request(NewSessionRequest::new(project.path()))
        .block_task()
        .await
        .expect("session/new");
    let root = opened.session_id.to_string();
    let answer = editor
        .cx
        .send_request(prompt(&root, "sh: cat main.rs; ls -A"))
        .block_task()
        .await
        .expect("session/prompt");
    assert_eq!(answer.stop_reason, StopReason::EndTurn);
    let said = text_in(&editor.seen(), &root, true);
    assert!(said.contains("fn main() { todo!() }"), "{said}");
    assert!(!said.contains("target"), "ignored files stay out: {said}");

    let refused = editor
        .cx
        .send_request(NewSessionRequest::new("/nonexistent/project"))
        .block_task()
        .await
        .expect_err("an unreadable project is refused");
    assert!(
        refused.message.contains("/nonexistent/project") && !refused.message.contains('\n'),
        "{refused:?}"
    );
    assert_eq!(
        cluster.cli_json(&["ls"])["sessions"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

/// A4: a child in a turn on a node that dies cannot be known to run: the editor is shown it
/// `unknown` (once, with why) as soon as the node's lease lapses, instead of `running` for
/// ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a4_a_child_whose_node_dies_mid_turn_is_shown_unknown() {
    let mut cluster = Cluster::start_with_toml(3, &[], &delegator_profiles());
    let editor = Editor::open(&cluster, true).await;
    let cwd = tempfile::tempdir().unwrap();
    let root = editor
        .cx
        .send_request(NewSessionRequest::new(cwd.path()))
        .block_task()
        .await
        .expect("session/new")
        .session_id
        .to_string();
    let spawn = r#"tool: spawn_subagent {"profile": "delegator", "prompt": "slow work", "shape": "continuable", "label": "far", "node": "node-2"}"#;
    editor
        .cx
        .send_request(prompt(&root, spawn))
        .block_task()
        .await
        .expect("session/prompt");
    editor
        .wait("the child announced", |seen| {
            announced(seen, &root).len() == 1
        })
        .await;
    let child = announced(&editor.seen(), &root)[0].0.clone();
    assert_eq!(states(&editor.seen(), &child), ["running"]);
    cluster.nodes[1].kill();
    editor
        .wait("the child shown unknown", |seen| {
            states(seen, &child).last().map(String::as_str) == Some("unknown")
        })
        .await;
    let why: Vec<String> = editor
        .seen()
        .iter()
        .filter_map(|n| match &n.update {
            SessionUpdate::SubagentUpdate(u) if u.session_id.to_string() == child => {
                serde_json::to_value(u).unwrap()["description"]
                    .as_str()
                    .map(str::to_owned)
            }
            _ => None,
        })
        .collect();
    assert!(
        why.iter().any(|d| d.contains("node-2")),
        "the editor is told why: {why:?}"
    );
    // Once: later lease reads of the dead node send nothing more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(states(&editor.seen(), &child), ["running", "unknown"]);
}
