//! Spawn both shapes against a real nats-server and a real registry (S1–S3, C1–C3, P1, E1, X2, M2).

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use lineage_core::descriptor::SubagentShape;
use lineage_core::messages::{InboxMessage, LifecycleEvent, StopReason};
use lineage_registry::SessionState;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s1_one_shot_returns_its_result_and_is_settled_then_disposed() {
    let cluster = Cluster::start().await;
    let host = cluster.host("node-a").await;
    let root = host
        .spawn(root_request(script(r#"{"turns": []}"#), "hi"))
        .await
        .expect("root");
    let subjects = lineage_bus::Subjects::new(CLUSTER).unwrap();
    let mut watch = lineage_bus::lifecycle::LifecycleWatch::subscribe(
        &cluster.client,
        &subjects,
        &root.session,
    )
    .await
    .unwrap();
    let reply = host
        .spawn(child_request(
            &root.session,
            SubagentShape::OneShot,
            script(r#"{"turns": [[{"do": "reply", "text": "the answer"}]]}"#),
            "compute",
        ))
        .await
        .expect("one-shot");
    let result = reply.result.expect("a one-shot returns its result");
    assert_eq!(result.output.as_deref(), Some("the answer"));
    assert_eq!(result.stop_reason, StopReason::Completed);
    assert_eq!(reply.depth, 1);
    let record = cluster.record(&reply.session).await;
    assert_eq!(record.state, SessionState::Disposed);
    assert_eq!(record.header.parent_session(), Some(&root.session));

    // E1: one start and one end, paired by run id, on the parent's subjects (the watch reads
    // two subjects, so arrival order between them is not defined).
    let mut starts = Vec::new();
    let mut ends = Vec::new();
    for _ in 0..2 {
        let event = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match event {
            LifecycleEvent::Start(s) => starts.push(s),
            LifecycleEvent::End(e) => ends.push(e),
        }
    }
    let (Some(s), Some(e)) = (starts.pop(), ends.pop()) else {
        panic!("one start and one end");
    };
    assert_eq!(s.run_id, e.run_id);
    assert_eq!(s.child_id, reply.session);
    assert!(s.local);
    assert_eq!(e.last_assistant_message.as_deref(), Some("the answer"));

    // C3 + P1 (one-shot: descriptor at the first pre-step, after the turn started).
    let log = cluster.log(&reply.session).await;
    let k = kinds(&log);
    let pos = |kind: &str| {
        k.iter()
            .position(|x| x == kind)
            .unwrap_or_else(|| panic!("{kind} in {k:?}"))
    };
    assert!(pos("sandbox/mode") < pos("turn/start"));
    assert!(pos("approval/policy") < pos("turn/start"));
    assert!(pos("turn/start") < pos("subagent/descriptor"));
    // The turn's end went with the dispose (`with_log`), and was durable before the result.
    assert!(pos("subagent/descriptor") < pos("turn/end"));
    assert_eq!(count_kind(&log, "subagent/descriptor"), 1);
    let approval = &log[pos("approval/policy")].data;
    assert_eq!(approval["policy"], "never");
    assert_eq!(approval["source"], "delegation");
    let sandbox = &log[pos("sandbox/mode")].data;
    assert_eq!(sandbox["mode"], "workspace-write");
    // The prompt is accepted with the creation window; the turn reads it.
    assert!(pos("host/agent") < pos("inbox/accepted"));
    assert!(pos("inbox/accepted") < pos("turn/start"));
    assert_eq!(
        log[pos("turn/start")].data["inputs"][0],
        log[pos("inbox/accepted")].seq
    );
    assert!(
        log.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "contiguous: {k:?}"
    );
    // Two messages on the child's subject: the creation window (policy, agent, accepted
    // prompt) and the whole one-shot turn, each all or nothing.
    let js = async_nats::jetstream::new(cluster.client.clone());
    let stream = js
        .get_stream(subjects.events_stream())
        .await
        .expect("events stream");
    let subject = subjects.session_events(&reply.session);
    let info = stream
        .info_with_subjects(subject.clone())
        .await
        .expect("stream info")
        .next()
        .await
        .expect("the child's subject")
        .expect("subject count");
    assert_eq!(info, (subject, 2));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn x2_continuable_settlement_is_delivered_after_the_commit() {
    let cluster = Cluster::start().await;
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let root = a
        .spawn(root_request(
            script(r#"{"turns": [], "after": {"do": "echo"}}"#),
            "hi",
        ))
        .await
        .expect("root");
    let subjects = lineage_bus::Subjects::new(CLUSTER).unwrap();
    // Watch the parent's inbox subject (JetStream publishes are visible to core subscribers).
    let mut inbox = cluster
        .client
        .subscribe(subjects.parent_inbox(&root.session))
        .await
        .unwrap();
    let mut req = child_request(
        &root.session,
        SubagentShape::Continuable,
        script(r#"{"turns": [[{"do": "reply", "text": "child finished"}]]}"#),
        "work",
    );
    req.node = Some(node("node-b"));
    let child = a.spawn(req).await.expect("continuable");
    assert_eq!(child.node, node("node-b"));
    assert!(child.result.is_none());

    let msg = tokio::time::timeout(Duration::from_secs(10), inbox.next())
        .await
        .expect("a settlement notice")
        .unwrap();
    // The notice is published only after `settled` was committed.
    let state = cluster.record(&child.session).await.state;
    assert_eq!(state, SessionState::Settled, "notice before commit");
    let InboxMessage::Settled(notice) = InboxMessage::decode(&msg.payload).unwrap() else {
        panic!("a settlement");
    };
    assert_eq!(notice.sender_session_id, child.session);
    assert_eq!(notice.stop_reason, StopReason::Completed);
    assert!(
        notice.summary.as_str().contains("worker completed"),
        "{}",
        notice.summary
    );
    // The notice was durable in the child's outbox before the commit (so a resumed child never
    // reuses its seq), together with the end of the turn that settled it.
    let log = cluster.log(&child.session).await;
    let outbox: Vec<_> = log.iter().filter(|e| e.kind == "outbox/settled").collect();
    assert_eq!(outbox.len(), 1, "{:?}", kinds(&log));
    assert_eq!(outbox[0].data["seq"], notice.seq);
    assert_eq!(outbox[0].data["summary"], notice.summary.as_str());
    assert_eq!(
        log.last().map(|e| e.kind.as_str()),
        Some("outbox/settled"),
        "{:?}",
        kinds(&log)
    );
    assert_eq!(log[log.len() - 2].kind, "turn/end");

    // The parent accepted it and took a turn on it.
    wait_for_async(
        Duration::from_secs(10),
        "the parent to echo the notice",
        || async {
            let log = cluster.log(&root.session).await;
            log.iter().any(|e| {
                e.kind == "turn/assistant"
                    && e.data["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("settled"))
            })
        },
    )
    .await;
    // P1: continuable descriptor right after the (empty) seed, before the first turn.
    let log = cluster.log(&child.session).await;
    assert_eq!(log[0].kind, "subagent/descriptor");
    assert!(
        !b.is_live(&child.session),
        "settled child handle is disposed"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn e2_a_parent_scoped_listener_sees_direct_children_only() {
    let cluster = Cluster::start().await;
    let host = cluster.host("node-a").await;
    let root = host
        .spawn(root_request(script(r#"{"turns": []}"#), "hi"))
        .await
        .unwrap();
    let subjects = lineage_bus::Subjects::new(CLUSTER).unwrap();
    let mut watch = lineage_bus::lifecycle::LifecycleWatch::subscribe(
        &cluster.client,
        &subjects,
        &root.session,
    )
    .await
    .unwrap();
    // The child spawns a one-shot grandchild from its own turn, then waits.
    let child = host
        .spawn(child_request(
            &root.session,
            SubagentShape::Continuable,
            script(
                r#"{"turns": [[{"do": "spawn", "shape": "one-shot", "prompt": "deep"},
                               {"do": "sleep", "ms": 60000}]]}"#,
            ),
            "c",
        ))
        .await
        .unwrap();
    wait_for_async(
        Duration::from_secs(10),
        "the grandchild's result in the child's log",
        || async { count_kind(&cluster.log(&child.session).await, "subagent/result") == 1 },
    )
    .await;
    let first = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.child_id(), &child.session);
    assert!(matches!(first, LifecycleEvent::Start(_)));
    // Nothing about the grandchild (its start and end went to the child's subjects).
    let more = tokio::time::timeout(Duration::from_millis(500), watch.next()).await;
    assert!(more.is_err(), "unexpected event: {more:?}");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s1_m2_a_one_shot_that_spawns_reads_its_childs_settlement() {
    let cluster = Cluster::start().await;
    let host = cluster.host("node-a").await;
    let root = host
        .spawn(root_request(script(r#"{"turns": []}"#), "hi"))
        .await
        .expect("root");
    // The one-shot's turn spawns a continuable grandchild that replies and settles; the
    // one-shot waits for it (owned), reads its settlement from its inbox (opened at the spawn),
    // and only then settles and returns.
    let reply = tokio::time::timeout(
        Duration::from_secs(20),
        host.spawn(child_request(
            &root.session,
            SubagentShape::OneShot,
            script(
                r#"{"turns": [[{"do": "spawn", "shape": "continuable", "prompt": "go",
                                 "agent": {"driver": "script", "script": {"turns": [[{"do": "reply", "text": "grandchild done"}]]}}},
                                {"do": "reply", "text": "spawned"}]],
                    "after": {"do": "echo"}}"#,
            ),
            "parent-one-shot",
        )),
    )
    .await
    .expect("the one-shot returns")
    .expect("one-shot");
    assert!(reply.result.is_some());
    let log = cluster.log(&reply.session).await;
    let settled = log
        .iter()
        .filter(|e| e.kind == "inbox/accepted" && e.data["message"]["kind"] == "subagent-settled")
        .count();
    assert_eq!(settled, 1, "{:?}", kinds(&log));
    // Its settled (not disposed) continuable child keeps it from being disposed (child first):
    // the commit records it `settled` instead.
    assert_eq!(
        cluster.record(&reply.session).await.state,
        SessionState::Settled
    );
    host.shutdown().await;
}

/// C1 (issue 32): a child joins its parent's composition, so its tool filter can only narrow
/// the parent's: a grandchild spawned with no filter gets its parent's, one with a wider filter
/// gets only the part within it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c1_a_grandchilds_tool_filter_never_widens_its_parents() {
    let cluster = MemCluster::start();
    let host = cluster.host("node-a").await;
    let root = scripted_root(&host, r#"{"turns": []}"#).await;
    let sleeper = script(r#"{"turns": [[{"do": "sleep", "ms": 30000}]]}"#);
    let mut request = child_request(&root, SubagentShape::Continuable, sleeper.clone(), "work");
    request.tool_filter = Some(vec!["spawn_subagent".into(), "report_to_parent".into()]);
    let child = host.spawn(request).await.expect("child").session;
    let filter_of = |record: lineage_registry::SessionRecord| {
        record.descriptor.expect("a descriptor").to_value()["tool_filter"].clone()
    };
    for (own, expected) in [
        (
            None,
            serde_json::json!(["spawn_subagent", "report_to_parent"]),
        ),
        (
            Some(vec![
                "send_to_child".to_owned(),
                "report_to_parent".to_owned(),
            ]),
            serde_json::json!(["report_to_parent"]),
        ),
    ] {
        let mut request = child_request(&child, SubagentShape::Continuable, sleeper.clone(), "sub");
        request.tool_filter = own;
        let grandchild = host.spawn(request).await.expect("grandchild").session;
        assert_eq!(filter_of(cluster.record(&grandchild).await), expected);
    }
}
