//! Observability of the host (O2) against a real nats-server and registry: the caller's W3C
//! trace context crosses nodes (control request -> per-node start -> the child's report and
//! settlement in the parent's inbox, and its lifecycle event), and the host counters move.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use lineage_bus::trace::TraceContext;
use lineage_bus::Subjects;
use lineage_core::descriptor::SubagentShape;
use lineage_host::control::{ops, SpawnReply, StatusReply, StatusRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn o2_trace_context_crosses_nodes_and_counters_move() {
    let cluster = Cluster::start().await;
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let root = a
        .spawn(root_request(script(r#"{"turns": []}"#), "hi"))
        .await
        .expect("root");
    let subjects = Subjects::new(CLUSTER).unwrap();
    // Core NATS subscribers see the JetStream inbox publishes and the lifecycle events, headers
    // included.
    let mut inbox = cluster
        .client
        .subscribe(subjects.parent_inbox(&root.session))
        .await
        .unwrap();
    let mut starts = cluster
        .client
        .subscribe(subjects.parent_start(&root.session))
        .await
        .unwrap();

    // What the CLI does: a cluster-wide spawn request carrying the caller's traceparent. Either
    // node may serve it (node-b forwards to node-a, where the parent lives); the child runs on
    // node-b.
    let caller = TraceContext::new_root();
    let mut request = child_request(
        &root.session,
        SubagentShape::Continuable,
        script(
            r#"{"turns": [[{"do": "report", "content": "half", "delivery": "quiet"}, {"do": "reply", "text": "done"}]]}"#,
        ),
        "go",
    );
    request.node = Some(node("node-b"));
    let reply: SpawnReply = lineage_bus::control::request_traced(
        &cluster.client,
        subjects.control(ops::SPAWN),
        &request,
        Duration::from_secs(10),
        Some(caller),
    )
    .await
    .expect("spawn");
    assert_eq!(reply.node, node("node-b"));

    let trace_of = |msg: &async_nats::Message| {
        TraceContext::from_headers(msg.headers.as_ref())
            .unwrap_or_else(|| panic!("no valid traceparent on {}", msg.subject))
    };
    let start = tokio::time::timeout(Duration::from_secs(5), starts.next())
        .await
        .expect("subagent/start")
        .unwrap();
    let start_ctx = trace_of(&start);
    assert_eq!(start_ctx.trace_id, caller.trace_id, "subagent/start");
    assert_ne!(start_ctx.span_id, caller.span_id);
    let mut kinds = Vec::new();
    for _ in 0..2 {
        let msg = tokio::time::timeout(Duration::from_secs(10), inbox.next())
            .await
            .expect("a report and a settlement notice")
            .unwrap();
        let ctx = trace_of(&msg);
        assert_eq!(
            ctx.trace_id, caller.trace_id,
            "inbox message on {}",
            msg.subject
        );
        let body: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
        kinds.push(body["kind"].as_str().unwrap().to_owned());
    }
    kinds.sort();
    assert_eq!(kinds, ["subagent-report", "subagent-settled"]);

    // Counters: node-a registered the root and the child and accepted both messages; node-b
    // ran the child, reported and settled it.
    wait_for_async(
        Duration::from_secs(10),
        "node-a accepted both inbox messages",
        || {
            let accepted = a.metrics().snapshot().inbox_accepted;
            async move { accepted == 2 }
        },
    )
    .await;
    let ma = a.metrics().snapshot();
    let mb = b.metrics().snapshot();
    assert_eq!(
        ma.spawns,
        vec![("top-level", 1), ("continuable", 1), ("one-shot", 0)]
    );
    assert_eq!(mb.spawns.iter().map(|(_, n)| n).sum::<u64>(), 0);
    assert_eq!(mb.reports, 1);
    assert!(mb.settlements.contains(&("completed", 1)), "{mb:?}");
    assert_eq!(ma.settlements.iter().map(|(_, n)| n).sum::<u64>(), 0);
    assert_eq!(ma.inbox_duplicates, 0);
    assert!(ma.inbox_lag_ms_max >= ma.inbox_lag.sum_ms / 2);

    // A resume and a drain are counted where they run.
    let resumed = a.resume(reply.session.clone()).await.expect("resume");
    assert_eq!(resumed.node, node("node-a"));
    assert_eq!(a.metrics().snapshot().resumes, 1);
    a.drain(vec![root.session.clone()]).await.expect("drain");
    let ma = a.metrics().snapshot();
    assert_eq!((ma.drains, ma.drain_failures), (1, 0));
    assert!(a.drain(vec![]).await.is_err());
    assert_eq!(a.metrics().snapshot().drain_failures, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o2_a_garbage_traceparent_is_ignored() {
    let cluster = Cluster::start().await;
    let _a = cluster.host("node-a").await;
    let subjects = Subjects::new(CLUSTER).unwrap();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("traceparent", "00-not-a-trace-01");
    let reply = cluster
        .client
        .request_with_headers(
            subjects.node_control(&node("node-a"), ops::STATUS),
            headers,
            serde_json::to_vec(&StatusRequest {}).unwrap().into(),
        )
        .await
        .expect("status");
    let envelope: lineage_bus::control::Reply<StatusReply> =
        serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(envelope.result.expect("served").node, node("node-a"));
}
