//! [`ControlClient`] against a real nats-server and a small responder (N3, O3): typed replies,
//! the service's `{code, message}` errors passed through unchanged, `unavailable` when nobody
//! serves or nobody answers in time, `internal` for a reply that is not an envelope, per-node
//! subjects, and the `Lineage-Forwarded` header (with a body from an older client that still
//! carries `"forwarded"`).

use std::time::Duration;

use futures::StreamExt;
use lineage_bus::control::{self, decode_routed_request, ControlError, ErrorCode, Hop};
use lineage_bus::{ControlClient, Subjects};
use lineage_core::authority::InterruptAuthority;
use lineage_core::ids::{NodeId, SessionId};
use lineage_protocol::control::{
    FollowupOutcome, FollowupReply, FollowupRequest, InterruptRequest, LiveAgent, StatusReply,
};
use lineage_protocol::FORWARDED_HEADER;
use lineage_testkit::NatsServer;

const A: &str = "01936c1e-7a3b-7cde-8f00-000000000001";

fn sid() -> SessionId {
    SessionId::parse(A).unwrap()
}

/// Serves `lineage.t.ctl.*` and `lineage.t.node.node-1.*` like a node would, by the message's
/// text: `missing` → not_found, `refuse` → refused, `bad` → bad_request, `boom` → internal,
/// `garbage` → a reply that is not an envelope, `slow` → no reply; anything else is delivered
/// (`already_delivered` when the request came with the forwarded header). `status` names the
/// subject it was asked on in `cluster`.
async fn responder(client: async_nats::Client) {
    let mut sub = client.subscribe("lineage.t.>").await.unwrap();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let Some(reply_to) = msg.reply.clone() else {
                continue;
            };
            let hop = Hop::from_header(
                msg.headers
                    .as_ref()
                    .and_then(|h| h.get(FORWARDED_HEADER))
                    .map(|v| v.as_str()),
            );
            let op = msg.subject.rsplit('.').next().unwrap_or("").to_owned();
            let body = match op.as_str() {
                "followup" => {
                    match decode_routed_request::<FollowupRequest>("followup", &msg.payload, hop) {
                        Err(e) => control::encode_reply::<()>(&Err(e)),
                        Ok((r, hop)) => {
                            let fail = |code, text: &str| {
                                control::encode_reply::<()>(&Err(ControlError::new(code, text)))
                            };
                            match r.content.as_str() {
                                "missing" => fail(ErrorCode::NotFound, "session x is not known"),
                                "refuse" => fail(ErrorCode::Refused, "admission closed"),
                                "bad" => fail(ErrorCode::BadRequest, "content is empty"),
                                "boom" => fail(ErrorCode::Internal, "a bug"),
                                "garbage" => b"not an envelope".to_vec(),
                                "slow" => continue,
                                _ => control::encode_reply(&Ok(FollowupReply {
                                    session: r.session,
                                    node: NodeId::parse("node-1").unwrap(),
                                    outcome: match hop {
                                        Hop::Forwarded => FollowupOutcome::AlreadyDelivered,
                                        Hop::Client => FollowupOutcome::Delivered,
                                    },
                                })),
                            }
                        }
                    }
                }
                "status" => control::encode_reply(&Ok(StatusReply {
                    node: NodeId::parse("node-1").unwrap(),
                    cluster: msg.subject.to_string(),
                    live: vec![LiveAgent {
                        session: sid(),
                        parent: None,
                        owner: None,
                        shape: None,
                        depth: 0,
                        in_turn: false,
                    }],
                })),
                other => control::encode_reply::<()>(&Err(ControlError::new(
                    ErrorCode::BadRequest,
                    format!("unknown op {other:?}"),
                ))),
            };
            let _ = client.publish(reply_to, body.into()).await;
        }
    });
}

fn followup(content: &str) -> FollowupRequest {
    FollowupRequest {
        session: sid(),
        content: content.to_owned(),
        request_id: None,
    }
}

#[tokio::test]
async fn n3_control_client_maps_replies_and_errors() {
    let server = NatsServer::start().unwrap();
    let nats = async_nats::connect(server.url()).await.unwrap();
    responder(nats.clone()).await;
    nats.flush().await.unwrap();
    let client = ControlClient::new(
        nats.clone(),
        Subjects::new("t").unwrap(),
        Duration::from_secs(5),
    );

    let ok = client.followup(&followup("hello")).await.unwrap();
    assert_eq!(ok.outcome, FollowupOutcome::Delivered);
    assert_eq!(ok.session, sid());

    for (text, code, message) in [
        ("missing", ErrorCode::NotFound, "session x is not known"),
        ("refuse", ErrorCode::Refused, "admission closed"),
        ("bad", ErrorCode::BadRequest, "content is empty"),
        ("boom", ErrorCode::Internal, "a bug"),
    ] {
        let err = client.followup(&followup(text)).await.unwrap_err();
        assert_eq!((err.code, err.message.as_str()), (code, message), "{text}");
        assert_eq!(err.code.exit_code(), code.exit_code());
    }

    let err = client.followup(&followup("garbage")).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Internal);
    assert!(
        err.message
            .starts_with("malformed reply on lineage.t.ctl.followup"),
        "{}",
        err.message
    );

    let err = client
        .with_timeout(Duration::from_millis(300))
        .followup(&followup("slow"))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("within 300 ms"), "{}", err.message);

    // Nobody serves another cluster's subjects.
    let other = ControlClient::new(
        nats.clone(),
        Subjects::new("u").unwrap(),
        Duration::from_secs(2),
    );
    let err = other.status().await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(
        err.message.contains("nobody serves lineage.u.ctl.status"),
        "{}",
        err.message
    );

    // An op the responder does not know: its bad_request comes back as it was sent.
    let err = client
        .interrupt(&InterruptRequest {
            target: sid(),
            authority: InterruptAuthority::Ancestor { session: sid() },
        })
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::BadRequest);
    assert_eq!(err.message, r#"unknown op "interrupt""#);
}

#[tokio::test]
async fn n3_control_client_per_node_subjects_and_the_forwarded_header() {
    let server = NatsServer::start().unwrap();
    let nats = async_nats::connect(server.url()).await.unwrap();
    responder(nats.clone()).await;
    nats.flush().await.unwrap();
    let client = ControlClient::new(
        nats.clone(),
        Subjects::new("t").unwrap(),
        Duration::from_secs(5),
    );
    let node = NodeId::parse("node-1").unwrap();

    assert_eq!(
        client.status().await.unwrap().cluster,
        "lineage.t.ctl.status"
    );
    let per_node = client.on(&node).status().await.unwrap();
    assert_eq!(per_node.cluster, "lineage.t.node.node-1.status");
    assert_eq!(per_node.live.len(), 1);

    // A client never marks its requests forwarded; a forwarding node sets the header.
    assert_eq!(
        client
            .on(&node)
            .followup(&followup("x"))
            .await
            .unwrap()
            .outcome,
        FollowupOutcome::Delivered
    );
    let forwarded: FollowupReply = control::request_with(
        &nats,
        client.on(&node).subject("followup"),
        &followup("x"),
        Duration::from_secs(5),
        None,
        Hop::Forwarded,
    )
    .await
    .unwrap();
    assert_eq!(forwarded.outcome, FollowupOutcome::AlreadyDelivered);

    // A body from an older client still carries `"forwarded"`: accepted, the flag dropped
    // (`false`) or read as the header (`true`, an older forwarding node).
    for (flag, outcome) in [
        (false, FollowupOutcome::Delivered),
        (true, FollowupOutcome::AlreadyDelivered),
    ] {
        let old = serde_json::json!({"session": A, "content": "x", "forwarded": flag});
        let reply: FollowupReply = control::request(
            &nats,
            client.subject("followup"),
            &old,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(reply.outcome, outcome, "forwarded: {flag}");
    }
    let bad = serde_json::json!({"session": A, "content": "x", "forwarded": "yes"});
    let err = control::request::<_, FollowupReply>(
        &nats,
        client.subject("followup"),
        &bad,
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::BadRequest);
    assert!(
        err.message.contains("Lineage-Forwarded header"),
        "{}",
        err.message
    );
}

/// Serves `lineage.h.ctl.followup` and `lineage.h.node.node-1.followup`: the content `N/MS`
/// answers `unavailable` with a retry hint of MS ms to the first N requests of the session,
/// then `delivered`. Counts every request it sees.
async fn hinting_responder(
    client: async_nats::Client,
) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let mut sub = client.subscribe("lineage.h.>").await.unwrap();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let Some(reply_to) = msg.reply.clone() else {
                continue;
            };
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let request: FollowupRequest = serde_json::from_slice(&msg.payload).unwrap();
            let (refusals, ms) = request.content.split_once('/').unwrap();
            let (refusals, ms): (usize, u64) = (refusals.parse().unwrap(), ms.parse().unwrap());
            let body = if n < refusals {
                control::encode_reply::<()>(&Err(ControlError::new(
                    ErrorCode::Unavailable,
                    "node node-1 cannot renew its lease",
                )
                .with_retry_after(Duration::from_millis(ms))))
            } else {
                control::encode_reply(&Ok(FollowupReply {
                    session: request.session,
                    node: NodeId::parse("node-1").unwrap(),
                    outcome: FollowupOutcome::Delivered,
                }))
            };
            let _ = client.publish(reply_to, body.into()).await;
        }
    });
    seen
}

#[tokio::test]
async fn k1_a_retry_hint_is_followed_for_a_call_with_a_request_id_within_its_deadline() {
    use std::sync::atomic::Ordering;
    let server = NatsServer::start().unwrap();
    let nats = async_nats::connect(server.url()).await.unwrap();
    let client = ControlClient::new(
        nats.clone(),
        Subjects::new("h").unwrap(),
        Duration::from_secs(5),
    );
    let with_id = |content: &str| FollowupRequest {
        request_id: Some(lineage_core::ids::RequestId::parse("req-1").unwrap()),
        ..followup(content)
    };
    let node = NodeId::parse("node-1").unwrap();

    // Asked to come back after 100 ms, twice: delivered by the third request, on the
    // cluster-wide subject and on a node's own.
    let seen = hinting_responder(nats.clone()).await;
    nats.flush().await.unwrap();
    for client in [client.clone(), client.on(&node)] {
        seen.store(0, Ordering::SeqCst);
        nats.flush().await.unwrap();
        let reply = client.followup(&with_id("2/100")).await.unwrap();
        assert_eq!(reply.outcome, FollowupOutcome::Delivered);
        assert_eq!(
            seen.load(Ordering::SeqCst),
            3,
            "{}",
            client.subject("followup")
        );
    }

    // Without a request id a repeat could apply it twice: the hint is handed to the caller.
    seen.store(0, Ordering::SeqCst);
    let err = client.followup(&followup("2/100")).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert_eq!(err.retry_after_ms, Some(100));
    assert_eq!(seen.load(Ordering::SeqCst), 1);

    // A hint the deadline leaves no room for is handed back at once.
    seen.store(0, Ordering::SeqCst);
    let err = client
        .with_timeout(Duration::from_millis(400))
        .followup(&with_id("2/1000"))
        .await
        .unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(seen.load(Ordering::SeqCst), 1);

    // Refused every time: bounded by the deadline, the last refusal returned. A hint of 0
    // waits the shortest wait (50 ms), not a busy loop.
    seen.store(0, Ordering::SeqCst);
    let err = client
        .with_timeout(Duration::from_millis(600))
        .followup(&with_id("1000000/0"))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    let sent = seen.load(Ordering::SeqCst);
    assert!((2..=13).contains(&sent), "{sent} requests in 600 ms");
}

#[test]
fn k1_a_retry_hint_is_on_the_wire_only_when_set() {
    let plain = ControlError::new(ErrorCode::Unavailable, "no leader");
    let text = String::from_utf8(control::encode_reply::<()>(&Err(plain.clone()))).unwrap();
    assert_eq!(
        text,
        r#"{"v":1,"error":{"code":"unavailable","message":"no leader"}}"#
    );
    let hinted = plain.with_retry_after(Duration::from_millis(500));
    let text = String::from_utf8(control::encode_reply::<()>(&Err(hinted.clone()))).unwrap();
    assert_eq!(
        text,
        r#"{"v":1,"error":{"code":"unavailable","message":"no leader","retry_after_ms":500}}"#
    );
    let back = control::decode_reply::<FollowupReply>("s", text.as_bytes()).unwrap_err();
    assert_eq!(back, hinted);
}
