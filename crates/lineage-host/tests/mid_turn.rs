//! Issue 10, fault 1, and actions during a turn (M3, H1, S1): a followup to a child in
//! mid-turn is accepted and answered while the turn still runs, a retried followup with the
//! same request id is recognised and never accepted twice, and a driver gets the outcome of
//! a one-shot child it spawned back inside the same turn.

mod common;

use std::time::Duration;

use common::*;
use lineage_core::ids::RequestId;
use lineage_host::control::{FollowupOutcome, FollowupRequest};

fn followup(session: &lineage_core::ids::SessionId, text: &str, id: &str) -> FollowupRequest {
    FollowupRequest {
        session: session.clone(),
        content: text.into(),
        request_id: Some(RequestId::parse(id).unwrap()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn m3_a_followup_mid_turn_is_answered_before_the_turn_ends_and_a_retry_is_recognised() {
    let cluster = Cluster::start().await;
    let host = cluster.host("node-a").await;
    // The first turn sleeps for a minute: long enough that "before the turn ends" is a fact
    // about the log, not a race.
    let (root, child) = root_and_continuable_child(
        &host,
        r#"{"turns": [[{"do": "sleep", "ms": 60000}]], "after": {"do": "echo"}}"#,
        "first",
    )
    .await;
    wait_for_async(
        Duration::from_secs(10),
        "the child's first turn",
        || async { count_kind(&cluster.log(&child).await, "turn/start") == 1 },
    )
    .await;
    let reply = host
        .followup(followup(&child, "second", "req-mid-1"))
        .await
        .unwrap();
    assert_eq!(reply.outcome, FollowupOutcome::Delivered);
    // Answered while the first turn runs: accepted (durable) and no turn has ended yet.
    let log = cluster.log(&child).await;
    assert_eq!(count_kind(&log, "turn/end"), 0, "{:?}", kinds(&log));
    let accepted: Vec<_> = log
        .iter()
        .filter(|e| e.kind == "inbox/accepted" && e.data["request_id"] == "req-mid-1")
        .collect();
    assert_eq!(accepted.len(), 1, "{:?}", kinds(&log));
    // The client timed out and retried: recognised, nothing added.
    let again = host
        .followup(followup(&child, "second", "req-mid-1"))
        .await
        .unwrap();
    assert_eq!(again.outcome, FollowupOutcome::AlreadyDelivered);
    // End the long turn; the followup is the next turn, read once.
    host.interrupt(lineage_host::control::InterruptRequest {
        target: child.clone(),
        authority: lineage_core::authority::InterruptAuthority::Ancestor {
            session: root.clone(),
        },
    })
    .await
    .unwrap();
    wait_for_async(Duration::from_secs(10), "the followup's turn", || async {
        cluster
            .log(&child)
            .await
            .iter()
            .any(|e| e.kind == "turn/assistant" && e.data["text"] == "second")
    })
    .await;
    let log = cluster.log(&child).await;
    let read = log
        .iter()
        .filter(|e| e.kind == "turn/user" && e.data["text"] == "second")
        .count();
    assert_eq!(read, 1, "{:?}", kinds(&log));
    let accepted = log
        .iter()
        .filter(|e| e.kind == "inbox/accepted" && e.data["request_id"] == "req-mid-1")
        .count();
    assert_eq!(accepted, 1, "accepted once: {:?}", kinds(&log));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h1_s1_a_one_shot_childs_result_comes_back_inside_the_parents_turn() {
    let cluster = Cluster::start().await;
    let host = cluster.host("node-a").await;
    let root = host
        .spawn(root_request(
            script(
                r#"{"turns": [[
                    {"do": "spawn", "shape": "one-shot", "prompt": "work",
                     "agent": {"driver": "script", "script": {"turns": [[{"do": "reply", "text": "child says 42"}]]}}},
                    {"do": "reply_result"}
                ]], "after": {"do": "echo"}}"#,
            ),
            "go",
        ))
        .await
        .unwrap()
        .session;
    wait_for_async(
        Duration::from_secs(20),
        "the parent's first turn to end",
        || async { count_kind(&cluster.log(&root).await, "turn/end") == 1 },
    )
    .await;
    let log = cluster.log(&root).await;
    let reply_at = log
        .iter()
        .position(|e| e.kind == "turn/assistant" && e.data["text"] == "child says 42")
        .unwrap_or_else(|| {
            panic!(
                "the child's output as the parent's reply: {:?}",
                kinds(&log)
            )
        });
    let result_at = log
        .iter()
        .position(|e| e.kind == "subagent/result")
        .unwrap();
    let end_at = log.iter().position(|e| e.kind == "turn/end").unwrap();
    assert!(
        result_at < reply_at && reply_at < end_at,
        "{:?}",
        kinds(&log)
    );
    assert_eq!(log[end_at].data["stop_reason"], "completed");
    // A continuable child's outcome is its id, at once.
    let parent = host
        .spawn(root_request(
            script(
                r#"{"turns": [[
                    {"do": "spawn", "shape": "continuable", "prompt": "work"},
                    {"do": "reply_result"}
                ]], "after": {"do": "echo"}}"#,
            ),
            "go",
        ))
        .await
        .unwrap()
        .session;
    wait_for_async(Duration::from_secs(20), "the parent's reply", || async {
        cluster.log(&parent).await.iter().any(|e| {
            e.kind == "turn/assistant"
                && e.data["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("spawned "))
        })
    })
    .await;
    host.shutdown().await;
}
