//! What arrives while a turn runs counts before the activation decides what comes next (X2):
//! a followup sent mid-turn is the child's next turn, not a settlement followed by a cold
//! resume (M3); a drain stop that cancels the turn settles the child as `disposed` (X1).
//!
//! Host logic only: these run on the in-memory bus twins and `MemoryRegistry` (no nats-server,
//! no Raft); the twins pass the same conformance suite as the NATS ports
//! (`lineage-bus/tests/conformance_*.rs`), and the end-to-end suites keep real NATS.

mod common;

use std::time::Duration;

use common::*;
use lineage_host::control::{FollowupOutcome, FollowupRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn m3_followup_during_a_turn_is_the_next_turn() {
    let cluster = MemCluster::start();
    let host = cluster.host("node-a").await;
    let (_root, child) = root_and_continuable_child(
        &host,
        r#"{"turns": [[{"do": "sleep", "ms": 800}]], "after": {"do": "echo"}}"#,
        "first",
    )
    .await;
    // Sent while the first turn sleeps: delivered to the live child, not resumed.
    let reply = host
        .followup(FollowupRequest {
            session: child.clone(),
            content: "second".into(),
            request_id: None,
        })
        .await
        .unwrap();
    assert_eq!(reply.outcome, FollowupOutcome::Delivered);
    wait_for_async(
        Duration::from_secs(10),
        "the child to settle after its second turn",
        || async { count_kind(&cluster.log(&child).await, "outbox/settled") == 1 },
    )
    .await;
    let log = cluster.log(&child).await;
    assert_eq!(count_kind(&log, "turn/start"), 2, "{:?}", kinds(&log));
    let settled_at = log.iter().position(|e| e.kind == "outbox/settled").unwrap();
    let second_turn = log.iter().rposition(|e| e.kind == "turn/start").unwrap();
    assert!(
        second_turn < settled_at,
        "no settlement between the turns: {:?}",
        kinds(&log)
    );
    assert!(log
        .iter()
        .any(|e| e.kind == "turn/assistant" && e.data["text"] == "second"));
    let record = cluster.record(&child).await;
    assert_eq!(record.placement.map(|p| p.epoch), Some(1), "never resumed");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn x1_drain_stop_mid_turn_settles_disposed() {
    let cluster = MemCluster::start();
    let host = cluster.host("node-a").await;
    let (root, child) = root_and_continuable_child(
        &host,
        r#"{"turns": [[{"do": "sleep", "ms": 60000}]]}"#,
        "work",
    )
    .await;
    wait_for_async(Duration::from_secs(10), "the child's turn", || async {
        count_kind(&cluster.log(&child).await, "turn/start") == 1
    })
    .await;
    host.drain(vec![root.clone()]).await.unwrap();
    let log = cluster.log(&child).await;
    let settled: Vec<_> = log.iter().filter(|e| e.kind == "outbox/settled").collect();
    assert_eq!(settled.len(), 1, "{:?}", kinds(&log));
    assert_eq!(settled[0].data["stop_reason"], "disposed");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn m3_followups_racing_the_settlement_are_all_delivered_once() {
    let cluster = MemCluster::start();
    let host = cluster.host("node-a").await;
    let (_root, child) = root_and_continuable_child(
        &host,
        r#"{"turns": [[{"do": "reply", "text": "first"}]], "after": {"do": "echo"}}"#,
        "first",
    )
    .await;
    // Followups at 0-3 ms intervals: each short turn settles the child, so many of them land
    // while it is settling (live here, its activation settled) or just after (cold). Every one
    // is delivered: to the live child, or to the child resumed once its settlement is done.
    let n = 60;
    let mut resumed = 0;
    for i in 0..n {
        let reply = host
            .followup(FollowupRequest {
                session: child.clone(),
                content: format!("n{i}"),
                request_id: None,
            })
            .await;
        match reply {
            Ok(r) if r.outcome == FollowupOutcome::ResumedAndDelivered => resumed += 1,
            Ok(_) => {}
            Err(e) => panic!("followup n{i}: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(i % 4)).await;
    }
    // The race was there to be lost: followups found the child settled (cold), more than a few
    // times (52 of 60 on an idle 2-core machine; fewer under load, as turns then overlap).
    assert!(
        resumed >= 3,
        "only {resumed} of {n} followups found the child cold"
    );
    wait_for_async(
        Duration::from_secs(20),
        "every followup read by a turn",
        || async {
            let log = cluster.log(&child).await;
            (0..n).all(|i| {
                log.iter()
                    .any(|e| e.kind == "turn/assistant" && e.data["text"] == format!("n{i}"))
            })
        },
    )
    .await;
    let log = cluster.log(&child).await;
    for i in 0..n {
        let text = format!("n{i}");
        let read = log
            .iter()
            .filter(|e| e.kind == "turn/user" && e.data["text"] == text)
            .count();
        assert_eq!(read, 1, "{text} read once: {:?}", kinds(&log));
    }
    host.shutdown().await;
}
