//! Actions during a turn (H1, M1–M4; issue 10, item 2): a driver follows up, interrupts and
//! lists its children and waits for them, and gets each outcome back inside the same turn.
//! Hosts on the in-memory twins, with scripted agents (the script's `followup`, `interrupt`,
//! `list_children` and `await_children` steps; `reply_result` replies with the last outcome).

mod common;

use std::time::Duration;

use common::*;
use lineage_core::ids::SessionId;
use lineage_core::log::SessionEvent;

/// The assistant replies of `session`'s log, in order.
fn replies(log: &[SessionEvent]) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "turn/assistant")
        .map(|e| e.data["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn first_turn_done(cluster: &MemCluster, session: &SessionId) -> Vec<SessionEvent> {
    wait_for_async(
        Duration::from_secs(20),
        "the parent's first turn to end",
        || async { count_kind(&cluster.log(session).await, "turn/end") >= 1 },
    )
    .await;
    cluster.log(session).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h1_m1_m2_a_turn_waits_for_its_child_and_receives_its_report_and_settlement() {
    let cluster = MemCluster::start();
    let host = cluster.host("node-a").await;
    let root = scripted_root(
        &host,
        r#"{"turns": [[
                    {"do": "spawn", "shape": "continuable", "prompt": "look", "label": "scout",
                     "agent": {"driver": "script", "script": {"turns": [[
                        {"do": "report", "content": "found it", "delivery": "wakeup"},
                        {"do": "reply", "text": "all done"}]]}}},
                    {"do": "await_children", "timeout_ms": 15000},
                    {"do": "reply_result"}
                ]], "after": {"do": "echo"}}"#,
    )
    .await;
    let log = first_turn_done(&cluster, &root).await;
    let child = log
        .iter()
        .find(|e| e.kind == "subagent/spawned")
        .map(|e| e.data["child"].as_str().unwrap().to_owned())
        .expect("a child");
    let reply = replies(&log).pop().expect("a reply");
    assert_eq!(
        reply,
        format!(
            "report from {child}: found it\nsettled {child}: subagent scout completed: all done"
        ),
        "{:?}",
        kinds(&log)
    );
    // Received in the turn (durable as `turn/inputs` before the reply), so no turn of their own.
    let inputs_at = log.iter().position(|e| e.kind == "turn/inputs").unwrap();
    assert_eq!(log[inputs_at].data["index"], 0);
    assert_eq!(log[inputs_at].data["inputs"].as_array().unwrap().len(), 2);
    let reply_at = log.iter().position(|e| e.kind == "turn/assistant").unwrap();
    assert!(inputs_at < reply_at, "{:?}", kinds(&log));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = cluster.log(&root).await;
    assert_eq!(count_kind(&later, "turn/start"), 1, "{:?}", kinds(&later));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h1_m3_m4_a_turn_interrupts_follows_up_and_lists_its_child() {
    let cluster = MemCluster::start();
    let host = cluster.host("node-a").await;
    let root = scripted_root(
        &host,
        r#"{"turns": [[
                    {"do": "spawn", "shape": "continuable", "prompt": "dig", "label": "worker",
                     "agent": {"driver": "script", "script": {"turns": [[
                        {"do": "report", "content": "digging"},
                        {"do": "sleep", "ms": 60000}]], "after": {"do": "echo"}}}},
                    {"do": "await_children", "mode": "any", "timeout_ms": 15000},
                    {"do": "interrupt"},
                    {"do": "reply_result"},
                    {"do": "await_children", "timeout_ms": 15000},
                    {"do": "reply_result"},
                    {"do": "followup", "content": "dig again"},
                    {"do": "reply_result"},
                    {"do": "await_children", "timeout_ms": 15000},
                    {"do": "reply_result"},
                    {"do": "list_children"},
                    {"do": "reply_result"}
                ]], "after": {"do": "echo"}}"#,
    )
    .await;
    let log = first_turn_done(&cluster, &root).await;
    let child = log
        .iter()
        .find(|e| e.kind == "subagent/spawned")
        .map(|e| e.data["child"].as_str().unwrap().to_owned())
        .expect("a child");
    assert_eq!(
        replies(&log),
        [
            "done".to_owned(),
            format!("settled {child}: subagent worker was interrupted"),
            "done".to_owned(),
            format!("settled {child}: subagent worker completed: dig again"),
            "worker settled digging".to_owned(),
        ],
        "{:?}",
        kinds(&log)
    );
    let child_log = cluster.log(&SessionId::parse(&child).unwrap()).await;
    assert!(
        child_log
            .iter()
            .any(|e| e.kind == "turn/end" && e.data["stop_reason"] == "interrupted"),
        "{:?}",
        kinds(&child_log)
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h1_m3_d3_actions_on_a_session_that_is_not_a_child_are_refused_in_one_line() {
    let cluster = MemCluster::start();
    let host = cluster.host("node-a").await;
    let stranger = "01936c1e-7a3b-7cde-8f00-000000000099";
    let root = scripted_root(
        &host,
        &format!(
            r#"{{"turns": [[
                    {{"do": "followup", "child": "{stranger}", "content": "hi"}},
                    {{"do": "reply_result"}},
                    {{"do": "await_children", "children": ["{stranger}"]}},
                    {{"do": "reply_result"}},
                    {{"do": "interrupt"}},
                    {{"do": "reply_result"}},
                    {{"do": "await_children", "timeout_ms": 100}},
                    {{"do": "reply_result"}},
                    {{"do": "list_children"}},
                    {{"do": "reply_result"}}
                ]], "after": {{"do": "echo"}}}}"#
        ),
    )
    .await;
    let log = first_turn_done(&cluster, &root).await;
    let not_mine = format!(
        "refused: session {stranger} is not a child of session {root}; list_children shows yours"
    );
    assert_eq!(
        replies(&log),
        [
            not_mine.clone(),
            not_mine,
            "refused: no child named and none spawned in this turn".to_owned(),
            // Nothing to wait for: over at once, nothing arrived.
            "(nothing arrived)".to_owned(),
            // No children: an empty list.
            String::new(),
        ],
        "{:?}",
        kinds(&log)
    );
    assert_eq!(
        log.iter()
            .filter(|e| e.kind == "turn/end")
            .map(|e| e.data["stop_reason"].clone())
            .collect::<Vec<_>>(),
        ["completed"],
        "a refused action does not fail the turn"
    );
    host.shutdown().await;
}
