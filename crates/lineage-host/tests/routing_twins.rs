//! Forward-once routing (R2, M3) between two hosts on the in-memory twins: each node serves
//! its control endpoints on the memory control transport (`lineage_bus::memory::MemoryControl`,
//! which passes the same conformance suite as the NATS micro service), so a request that lands
//! on the wrong node is forwarded to the node hosting the session, once, in milliseconds.

mod common;

use std::time::Duration;

use common::*;
use lineage_host::control::{FollowupOutcome, FollowupRequest, Hop};
use lineage_host::service;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r2_followup_on_another_node_is_forwarded_to_the_host() {
    let cluster = MemCluster::start();
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let served_a = service::serve(a.clone()).await.expect("node-a serves");
    let served_b = service::serve(b.clone()).await.expect("node-b serves");
    let (_root, child) = root_and_continuable_child(
        &a,
        r#"{"turns": [[{"do": "sleep", "ms": 300}]], "after": {"do": "echo"}}"#,
        "first",
    )
    .await;
    let reply = b
        .followup(FollowupRequest {
            session: child.clone(),
            content: "via node-b".into(),
            request_id: None,
        })
        .await
        .expect("forwarded and delivered");
    assert_eq!(reply.node, node("node-a"), "served where the child lives");
    assert_eq!(reply.outcome, FollowupOutcome::Delivered);
    assert!(!b.is_live(&child), "node-b never hosted it");
    wait_for_async(
        Duration::from_secs(10),
        "the forwarded followup's turn",
        || async {
            cluster
                .log(&child)
                .await
                .iter()
                .any(|e| e.kind == "turn/assistant" && e.data["text"] == "via node-b")
        },
    )
    .await;
    served_a.stop().await;
    served_b.stop().await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r2_a_forwarded_request_is_never_forwarded_again() {
    let cluster = MemCluster::start();
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let served_a = service::serve(a.clone()).await.expect("node-a serves");
    let (_root, child) = root_and_continuable_child(
        &a,
        r#"{"turns": [[{"do": "sleep", "ms": 300}]], "after": {"do": "echo"}}"#,
        "first",
    )
    .await;
    // As if node-a had forwarded it to node-b (a stale placement): node-b serves it itself and
    // does not send it back; the child is live on node-a with a current lease, so node-b
    // cannot take it over, and says so.
    let refused = b
        .followup_via(
            FollowupRequest {
                session: child.clone(),
                content: "bounced".into(),
                request_id: None,
            },
            Hop::Forwarded,
        )
        .await
        .expect_err("node-b does not host it and must not forward it again");
    let log = cluster.log(&child).await;
    assert!(
        !log.iter().any(|e| e.data["text"] == "bounced"),
        "never delivered: {refused}"
    );
    assert!(!b.is_live(&child), "node-b did not take it over");
    assert!(a.is_live(&child), "still live on node-a");
    served_a.stop().await;
    a.shutdown().await;
    b.shutdown().await;
}
