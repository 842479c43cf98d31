//! The `lineage` service (N3) and cold resume across nodes (K1, R2).

mod common;

use std::time::Duration;

use common::*;
use lineage_bus::control::{request, ControlError, ErrorCode};
use lineage_core::descriptor::SubagentShape;
use lineage_host::control::{
    FollowupOutcome, FollowupReply, FollowupRequest, SpawnReply, StatusReply, StatusRequest,
};
use lineage_registry::SessionState;

async fn raw(cluster: &Cluster, subject: String, body: &str) -> serde_json::Value {
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        cluster.client.request(subject, body.to_owned().into()),
    )
    .await
    .unwrap()
    .unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn n3_service_answers_and_refuses_bad_input_without_state_change() {
    let cluster = Cluster::start().await;
    let a = cluster.host("node-a").await;
    let subjects = lineage_bus::Subjects::new(CLUSTER).unwrap();
    for (op, body, code) in [
        ("spawn", "{not json", "bad_request"),
        (
            "spawn",
            r#"{"agent": {"driver": "script", "script": {}}, "max_depth": -1}"#,
            "bad_request",
        ),
        (
            "spawn",
            r#"{"agent": {"driver": "script", "script": {}}, "max_depth": 1.5}"#,
            "bad_request",
        ),
        (
            "followup",
            r#"{"session": "a.b", "content": "x"}"#,
            "bad_request",
        ),
        (
            "followup",
            r#"{"session": "01936c1e-7a3b-7cde-8f00-000000000009", "content": "x"}"#,
            "not_found",
        ),
        ("drain", r#"{"roots": []}"#, "bad_request"),
        (
            "interrupt",
            r#"{"target": "01936c1e-7a3b-7cde-8f00-000000000009", "authority": {"kind": "god"}}"#,
            "bad_request",
        ),
    ] {
        let reply = raw(&cluster, subjects.control(op), body).await;
        assert_eq!(reply["v"], 1, "{op} {body}: {reply}");
        assert_eq!(reply["error"]["code"], code, "{op} {body}: {reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(!message.contains('\n'));
    }
    assert!(a.status().live.is_empty(), "no state change");

    // A well-formed spawn through the service, then status from the node subject.
    let spawned: SpawnReply = request(
        &cluster.client,
        subjects.control("spawn"),
        &root_request(script(r#"{"turns": []}"#), "hello"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let status: StatusReply = request(
        &cluster.client,
        subjects.node_control(&node("node-a"), "status"),
        &StatusRequest {},
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(status.live.len(), 1);
    assert_eq!(status.live[0].session, spawned.session);

    // Depth cap from the request: a child past max depth is refused by a rule.
    let mut req = child_request(&spawned.session, SubagentShape::OneShot, script("{}"), "x");
    req.max_depth = Some(lineage_core::depth::MaxDepth::from_u32(0));
    let err: ControlError = request::<_, SpawnReply>(
        &cluster.client,
        subjects.control("spawn"),
        &req,
        Duration::from_secs(10),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Refused, "{err:?}");
    assert!(err.message.contains("max depth 0"), "{}", err.message);
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k1_cold_child_resumes_on_another_node_without_owner_and_still_reports_home() {
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
    let mut req = child_request(
        &root.session,
        SubagentShape::Continuable,
        script(
            r#"{"turns": [[{"do": "sleep", "ms": 60000}],
                          [{"do": "report", "content": "back", "delivery": "quiet"},
                           {"do": "reply", "text": "resumed"}]]}"#,
        ),
        "work",
    );
    req.node = Some(node("node-b"));
    let child = a.spawn(req).await.unwrap();
    b.shutdown().await; // node-b dies mid-turn
    tokio::time::sleep(Duration::from_millis(3500)).await; // its lease expires

    // Any node may resume it: node-c claims it (epoch CAS) on the followup.
    let subjects = lineage_bus::Subjects::new(CLUSTER).unwrap();
    let reply: FollowupReply = request(
        &cluster.client,
        subjects.node_control(&node("node-c"), "followup"),
        &FollowupRequest {
            session: child.session.clone(),
            content: "continue".into(),
            request_id: None,
        },
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(reply.outcome, FollowupOutcome::ResumedAndDelivered);
    assert_eq!(reply.node, node("node-c"));
    let record = cluster.record(&child.session).await;
    assert_eq!(record.placement.as_ref().unwrap().node, node("node-c"));
    assert_eq!(record.placement.as_ref().unwrap().epoch, 2);
    // R2: its durable parent is not live on node-c, so it has no runtime owner.
    let live = c.status().live;
    if let Some(entry) = live.iter().find(|l| l.session == child.session) {
        assert_eq!(entry.owner, None);
        assert_eq!(entry.parent.as_ref(), Some(&root.session));
        assert_eq!(entry.depth, 1, "L3: depth from the frozen header");
    }
    // The settlement still reaches the parent on node-a, with the quiet report before it.
    wait_for_async(
        Duration::from_secs(15),
        "the resumed child's settlement at the parent",
        || async {
            let log = cluster.log(&root.session).await;
            log.iter().any(|e| {
                e.kind == "turn/assistant"
                    && e.data["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("back") && t.contains("settled"))
            })
        },
    )
    .await;
    assert_eq!(
        cluster.record(&child.session).await.state,
        SessionState::Settled
    );
    // K1: two nodes race to resume the cold child: exactly one wins the epoch CAS.
    wait_for_async(
        Duration::from_secs(10),
        "the settled child to leave node-c",
        || async { !c.is_live(&child.session) },
    )
    .await;
    let (ra, rc) = tokio::join!(
        a.resume(child.session.clone()),
        c.resume(child.session.clone())
    );
    let wins = [&ra, &rc].iter().filter(|r| r.is_ok()).count();
    assert_eq!(wins, 1, "{ra:?} {rc:?}");
    let loser = match (ra, rc) {
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => e,
        other => panic!("one winner, one loser: {other:?}"),
    };
    assert!(
        matches!(loser, lineage_host::HostError::ClaimLost { .. }),
        "{loser:?}"
    );
    assert_eq!(
        cluster
            .record(&child.session)
            .await
            .placement
            .unwrap()
            .epoch,
        3
    );
    a.shutdown().await;
    c.shutdown().await;
}
