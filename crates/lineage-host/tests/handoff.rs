//! Graceful shutdown (K1, `lineage_host::handoff`) on the in-memory twins: a winding-down host
//! lets a running turn finish, queues a followup that arrives meanwhile, releases its idle
//! sessions and has another node resume the one with input waiting; a turn that outlives the
//! grace is the only one cut short.

mod common;

use std::time::Duration;

use common::*;
use lineage_host::control::{FollowupOutcome, FollowupRequest};
use lineage_host::service;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k1_a_winding_down_host_finishes_the_turn_queues_the_followup_and_hands_off() {
    let cluster = MemCluster::start();
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let served_a = service::serve(a.clone()).await.expect("node-a serves");
    let served_b = service::serve(b.clone()).await.expect("node-b serves");
    let (root, child) = root_and_continuable_child(
        &a,
        r#"{"turns": [[{"do": "sleep", "ms": 600}, {"do": "reply", "content": "first"}]], "after": {"do": "echo"}}"#,
        "go",
    )
    .await;
    cluster.first_turn_started(&child).await;

    served_a.leave_group().await;
    let winding = a.clone();
    let report = tokio::spawn(async move { winding.wind_down(Duration::from_secs(5)).await });
    // A followup that reaches node-b is forwarded to node-a, which still hosts the child:
    // accepted into its log at once, not run there.
    let reply = b
        .followup(FollowupRequest {
            session: child.clone(),
            content: "during the grace".into(),
            request_id: None,
        })
        .await
        .expect("accepted while node-a winds down");
    assert_eq!(reply.node, node("node-a"));
    assert_eq!(reply.outcome, FollowupOutcome::Delivered);

    let report = report.await.expect("wind_down");
    assert!(report.waited_ms < 5000, "{report:?}");
    assert!(report.cut_short.is_empty(), "{report:?}");
    assert!(report.kept.is_empty(), "{report:?}");
    let mut released = report.released.clone();
    released.sort();
    let mut expected = vec![root.clone(), child.clone()];
    expected.sort();
    assert_eq!(released, expected, "{report:?}");
    // The child has the followup waiting: resumed on node-b at once. The idle root is not.
    assert_eq!(
        report.resumed_elsewhere,
        vec![(child.clone(), node("node-b"))],
        "{report:?}"
    );
    let log = wait_for_async(
        Duration::from_secs(10),
        "the queued followup's turn",
        || async {
            let log = cluster.log(&child).await;
            log.iter()
                .any(|e| e.kind == "turn/assistant" && e.data["text"] == "during the grace")
                .then_some(log)
        },
    )
    .await;
    for end in log.iter().filter(|e| e.kind == "turn/end") {
        assert_eq!(end.data["stop_reason"], "completed", "{:?}", kinds(&log));
    }
    // Hosted by node-b since (it may have settled there already).
    let moved = cluster.record(&child).await.placement.expect("placed");
    assert_eq!(moved.node, node("node-b"), "{moved:?}");
    assert!(!a.is_live(&child));
    // The root is released, not hosted anywhere: resumed wherever its next request lands.
    let placement = cluster.record(&root).await.placement.expect("placed");
    assert!(
        placement.released && placement.host().is_none(),
        "{placement:?}"
    );
    assert_eq!(placement.node, node("node-a"));
    let reply = b
        .followup(FollowupRequest {
            session: root.clone(),
            content: "hello again".into(),
            request_id: None,
        })
        .await
        .expect("resumed at once on node-b");
    assert_eq!(reply.node, node("node-b"));
    assert_eq!(reply.outcome, FollowupOutcome::ResumedAndDelivered);

    served_a.stop().await;
    served_b.stop().await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k1_a_turn_that_outlives_the_grace_is_cut_short_and_not_released() {
    let cluster = MemCluster::start();
    let a = cluster.host("node-a").await;
    let served_a = service::serve(a.clone()).await.expect("node-a serves");
    let (_root, child) =
        root_and_continuable_child(&a, r#"{"turns": [[{"do": "sleep", "ms": 60000}]]}"#, "go")
            .await;
    cluster.first_turn_started(&child).await;
    served_a.leave_group().await;
    let report = a.wind_down(Duration::from_millis(300)).await;
    assert!(report.waited_ms >= 300, "{report:?}");
    assert_eq!(report.cut_short, vec![child.clone()], "{report:?}");
    let placement = cluster.record(&child).await.placement.expect("placed");
    assert!(
        !placement.released,
        "a cut-short session stays placed: {placement:?}"
    );
    served_a.stop().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k1_a_child_spawned_during_the_grace_is_born_on_another_node() {
    let cluster = MemCluster::start();
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let served_a = service::serve(a.clone()).await.expect("node-a serves");
    let served_b = service::serve(b.clone()).await.expect("node-b serves");
    let root = scripted_root(
        &a,
        r#"{"turns": [[{"do": "sleep", "ms": 400},
            {"do": "spawn", "shape": "continuable", "prompt": "work",
             "agent": {"driver": "script", "script": {"turns": [[{"do": "reply", "content": "born elsewhere"}]]}}},
            {"do": "reply_result"}]]}"#,
    )
    .await;
    wait_for_async(
        Duration::from_secs(10),
        "the root's turn under way",
        || async { count_kind(&cluster.log(&root).await, "turn/start") == 1 },
    )
    .await;
    served_a.leave_group().await;
    let report = a.wind_down(Duration::from_secs(5)).await;
    assert!(report.cut_short.is_empty(), "{report:?}");
    let log = cluster.log(&root).await;
    let spawned: Vec<_> = log
        .iter()
        .filter(|e| e.kind == "subagent/spawned")
        .collect();
    assert_eq!(spawned.len(), 1, "{:?}", kinds(&log));
    let child = lineage_core::ids::SessionId::parse(
        spawned[0].data["child"].as_str().expect("the child's id"),
    )
    .unwrap();
    let placement = cluster.record(&child).await.placement.expect("placed");
    assert_eq!(
        placement.node,
        node("node-b"),
        "not born on the node winding down"
    );
    wait_for_async(
        Duration::from_secs(10),
        "the child's first turn on node-b",
        || async {
            cluster
                .log(&child)
                .await
                .iter()
                .any(|e| e.kind == "turn/assistant" && e.data["text"] == "born elsewhere")
        },
    )
    .await;
    served_a.stop().await;
    served_b.stop().await;
    a.shutdown().await;
    b.shutdown().await;
}
