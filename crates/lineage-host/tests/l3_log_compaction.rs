//! Issue 35, L3/K1: a continuable turn's many log messages are compacted into one at its end,
//! and the compacted log resumes cold on another node with every event once.

mod common;

use std::time::Duration;

use common::*;
use lineage_bus::events::{EventLogStore, LogRead};
use lineage_core::descriptor::SubagentShape;
use lineage_host::control::FollowupRequest;
use lineage_registry::SessionState;

const REPLIES: usize = 30;

async fn read_log(cluster: &Cluster, session: &lineage_core::ids::SessionId) -> LogRead {
    EventLogStore::open(
        cluster.client.clone(),
        lineage_bus::Subjects::new(CLUSTER).unwrap(),
    )
    .await
    .unwrap()
    .read_log(session)
    .await
    .unwrap()
}

fn contiguous(read: &LogRead) -> bool {
    read.events.iter().zip(1u64..).all(|(e, n)| e.seq == n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn l3_a_continuable_turn_is_one_log_message_after_its_end_and_resumes_cold_elsewhere() {
    let cluster = Cluster::start().await;
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let c = cluster.host("node-c").await;
    let root = a
        .spawn(root_request(
            script(r#"{"turns": [], "after": {"do": "echo"}}"#),
            "hi",
        ))
        .await
        .unwrap();
    // First turn: thirty replies, each made durable on its own (a continuable session).
    let replies: Vec<String> = (0..REPLIES)
        .map(|i| format!(r#"{{"do": "reply", "text": "r{i}"}}"#))
        .collect();
    let child_script = format!(
        r#"{{"turns": [[{}], [{{"do": "reply", "text": "second"}}]]}}"#,
        replies.join(",")
    );
    let mut req = child_request(
        &root.session,
        SubagentShape::Continuable,
        script(&child_script),
        "work",
    );
    req.node = Some(node("node-b"));
    let child = a.spawn(req).await.unwrap();
    wait_for_async(
        Duration::from_secs(20),
        "the child to settle and go cold",
        || async {
            cluster.record(&child.session).await.state == SessionState::Settled
                && !b.is_live(&child.session)
        },
    )
    .await;
    let first = read_log(&cluster, &child.session).await;
    assert_eq!(
        first.messages, 1,
        "the turn's end compacted the log: {} messages",
        first.messages
    );
    assert!(contiguous(&first), "{:?}", kinds(&first.events));
    assert_eq!(count_kind(&first.events, "turn/assistant"), REPLIES);
    assert_eq!(first.cursor.last_event_seq, first.events.len() as u64);

    // Cold resume on node-c from the compacted log: the second turn follows the first.
    let resumed = c.resume(child.session.clone()).await.unwrap();
    assert_eq!(resumed.node, node("node-c"));
    let reply = c
        .followup(FollowupRequest {
            session: child.session.clone(),
            content: "again".into(),
            request_id: None,
        })
        .await
        .unwrap();
    assert_eq!(reply.node, node("node-c"), "{reply:?}");
    wait_for_async(
        Duration::from_secs(20),
        "the second turn to settle",
        || async {
            let log = cluster.log(&child.session).await;
            count_kind(&log, "turn/assistant") == REPLIES + 1 && !c.is_live(&child.session)
        },
    )
    .await;
    let second = read_log(&cluster, &child.session).await;
    assert!(contiguous(&second), "{:?}", kinds(&second.events));
    assert_eq!(second.events[..first.events.len()], first.events[..]);
    // A short turn after a compaction is not worth another: its few messages follow.
    assert!(
        second.messages > 1 && second.messages < lineage_core::log::COMPACT_MIN_MESSAGES,
        "{} messages",
        second.messages
    );
    a.shutdown().await;
    b.shutdown().await;
    c.shutdown().await;
}
