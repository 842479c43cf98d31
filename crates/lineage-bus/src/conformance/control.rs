//! Conformance cases of the control transport ([`crate::ports::ControlTransport`]).

use std::time::Duration;

use lineage_core::ids::{DrainId, NodeId};

use super::{Backend, DELIVERY};
use crate::control::{ErrorCode, Hop};
use crate::ports::{ControlCall, ControlEndpoints, ControlTarget, IncomingCall};
use crate::trace::TraceContext;

/// How long a case waits for a reply it expects.
const REPLY: Duration = Duration::from_secs(5);

fn node(name: &str) -> NodeId {
    NodeId::parse(name).expect("a valid node id")
}

fn call(op: &str, body: &str, hop: Hop) -> ControlCall {
    ControlCall {
        op: op.to_owned(),
        body: body.as_bytes().to_vec(),
        hop,
        trace: Some(
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .expect("a valid traceparent"),
        ),
    }
}

async fn next_call(endpoints: &mut dyn ControlEndpoints, what: &str) -> IncomingCall {
    tokio::time::timeout(DELIVERY, endpoints.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: no call within {DELIVERY:?}"))
        .unwrap_or_else(|| panic!("{what}: the endpoints closed"))
}

/// A call to a node reaches that node's endpoints unchanged (op, body, hop, trace), not
/// another node's, and its caller gets the bytes the node answered.
pub async fn control_call_reaches_its_node(b: &dyn Backend) {
    let transport = b.control().await;
    let mut a = transport
        .serve(&node("node-a"))
        .await
        .expect("serve node-a");
    let mut other = transport
        .serve(&node("node-b"))
        .await
        .expect("serve node-b");
    let sent = call("status", r#"{"n":1}"#, Hop::Forwarded);
    let caller = b.control().await;
    let target = ControlTarget::Node(node("node-a"));
    let expected = sent.clone();
    let asking = tokio::spawn(async move { caller.request(&target, sent, REPLY).await });
    let got = next_call(a.as_mut(), "node-a's call").await;
    assert_eq!(got.call, expected, "the call arrives as it was sent");
    (got.respond)(b"answer-a".to_vec()).await.expect("respond");
    let reply = asking.await.expect("the caller task").expect("a reply");
    assert_eq!(reply, b"answer-a".to_vec());
    if let Ok(Some(stray)) = tokio::time::timeout(Duration::from_millis(300), other.next()).await {
        panic!("node-b received a call meant for node-a: {stray:?}");
    }
    a.stop().await;
    other.stop().await;
}

/// A call to any node is served by exactly one of the serving nodes.
pub async fn control_any_is_served_once(b: &dyn Backend) {
    let transport = b.control().await;
    let mut a = transport
        .serve(&node("node-a"))
        .await
        .expect("serve node-a");
    let mut c = transport
        .serve(&node("node-c"))
        .await
        .expect("serve node-c");
    let caller = b.control().await;
    const CALLS: usize = 6;
    let asking = tokio::spawn(async move {
        let mut replies = Vec::new();
        for n in 0..CALLS {
            let body = format!("{{\"n\":{n}}}");
            let reply = caller
                .request(
                    &ControlTarget::Any,
                    call("spawn", &body, Hop::Client),
                    REPLY,
                )
                .await
                .expect("a reply");
            replies.push(String::from_utf8(reply).expect("utf-8"));
        }
        replies
    });
    let mut served = Vec::new();
    while served.len() < CALLS {
        let got = tokio::time::timeout(DELIVERY, async {
            tokio::select! {
                Some(call) = a.next() => ("node-a", call),
                Some(call) = c.next() => ("node-c", call),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("only {} of {CALLS} calls were served", served.len()));
        let (by, incoming) = got;
        let body = String::from_utf8(incoming.call.body.clone()).expect("utf-8");
        served.push(body.clone());
        (incoming.respond)(format!("{by}:{body}").into_bytes())
            .await
            .expect("respond");
    }
    let replies = asking.await.expect("the caller task");
    assert_eq!(replies.len(), CALLS);
    for (n, reply) in replies.iter().enumerate() {
        assert!(
            reply.ends_with(&format!(":{{\"n\":{n}}}")),
            "reply {n} answers call {n}: {reply}"
        );
    }
    served.sort();
    served.dedup();
    assert_eq!(served.len(), CALLS, "each call served once");
    for extra in [a.as_mut(), c.as_mut()] {
        if let Ok(Some(stray)) =
            tokio::time::timeout(Duration::from_millis(300), extra.next()).await
        {
            panic!("a call was delivered twice: {stray:?}");
        }
    }
    a.stop().await;
    c.stop().await;
}

/// K1, graceful shutdown: a node that left the queue group gets no more calls to any node
/// (they go to the others) but still gets the calls to its own subjects.
pub async fn control_left_group_still_serves_its_own_calls(b: &dyn Backend) {
    let transport = b.control().await;
    let mut leaving = transport
        .serve(&node("node-l"))
        .await
        .expect("serve node-l");
    let mut staying = transport
        .serve(&node("node-t"))
        .await
        .expect("serve node-t");
    leaving.leave_group().await;
    let caller = b.control().await;
    const CALLS: usize = 4;
    let asking = tokio::spawn(async move {
        let mut replies = Vec::new();
        for n in 0..CALLS {
            let body = format!("{{\"n\":{n}}}");
            let reply = caller
                .request(
                    &ControlTarget::Any,
                    call("status", &body, Hop::Client),
                    REPLY,
                )
                .await
                .expect("a reply");
            replies.push(String::from_utf8(reply).expect("utf-8"));
        }
        let own = caller
            .request(
                &ControlTarget::Node(node("node-l")),
                call("followup", "{}", Hop::Forwarded),
                REPLY,
            )
            .await
            .expect("the leaving node answers its own subject");
        (replies, String::from_utf8(own).expect("utf-8"))
    });
    for n in 0..CALLS {
        let got = tokio::time::timeout(DELIVERY, async {
            tokio::select! {
                Some(call) = leaving.next() => ("node-l", call),
                Some(call) = staying.next() => ("node-t", call),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("call {n} was not served"));
        let (by, incoming) = got;
        assert_eq!(
            by, "node-t",
            "a node that left the group got a call to any node"
        );
        (incoming.respond)(b"t".to_vec()).await.expect("respond");
    }
    let own = next_call(leaving.as_mut(), "node-l's own call").await;
    assert_eq!(own.call.op, "followup");
    (own.respond)(b"l".to_vec()).await.expect("respond");
    let (replies, reply) = asking.await.expect("the caller task");
    assert_eq!(replies, vec!["t"; CALLS]);
    assert_eq!(reply, "l");
    leaving.stop().await;
    staying.stop().await;
}

/// A call nobody serves, to a node whose endpoints stopped, or that nobody answers in time,
/// is `unavailable`, and says so well within its deadline plus a margin.
pub async fn control_unserved_is_unavailable(b: &dyn Backend) {
    let transport = b.control().await;
    let deadline = Duration::from_millis(800);
    let ask = |n: &str| {
        let transport = transport.clone();
        let target = ControlTarget::Node(node(n));
        async move {
            let started = tokio::time::Instant::now();
            let got = transport
                .request(&target, call("status", "{}", Hop::Client), deadline)
                .await;
            (got, started.elapsed())
        }
    };
    let (got, took) = ask("node-z").await;
    let e = got.expect_err("nobody serves node-z");
    assert_eq!(e.code, ErrorCode::Unavailable, "{e:?}");
    assert!(took < deadline + Duration::from_secs(2), "took {took:?}");

    let silent = transport
        .serve(&node("node-s"))
        .await
        .expect("serve node-s");
    let (got, took) = ask("node-s").await;
    let e = got.expect_err("node-s never answers");
    assert_eq!(e.code, ErrorCode::Unavailable, "{e:?}");
    assert!(took >= deadline, "answered before the deadline: {took:?}");
    assert!(took < deadline + Duration::from_secs(2), "took {took:?}");

    silent.stop().await;
    let (got, took) = ask("node-s").await;
    let e = got.expect_err("node-s stopped serving");
    assert_eq!(e.code, ErrorCode::Unavailable, "{e:?}");
    assert!(
        took < deadline,
        "a stopped node is known not to serve at once, not after the deadline: {took:?}"
    );
}

/// Drain progress reaches the watches of that drain, in order, and no other drain's.
pub async fn control_progress_reaches_watchers(b: &dyn Backend) {
    let transport = b.control().await;
    let drain = DrainId::parse("01936c1e-7a3b-7cde-8f00-000000000d01").expect("a drain id");
    let other = DrainId::parse("01936c1e-7a3b-7cde-8f00-000000000d02").expect("a drain id");
    let mut watch = transport.watch_progress(&drain).await.expect("watch");
    let mut watch_other = transport.watch_progress(&other).await.expect("watch other");
    let publisher = b.control().await;
    for n in 0..3u8 {
        publisher
            .progress(&drain, vec![b'0' + n])
            .await
            .expect("publish progress");
    }
    for n in 0..3u8 {
        let got = tokio::time::timeout(DELIVERY, watch.next())
            .await
            .unwrap_or_else(|_| panic!("progress {n}: nothing within {DELIVERY:?}"))
            .expect("the feed is open");
        assert_eq!(got, vec![b'0' + n], "progress in order");
    }
    if let Ok(got) = tokio::time::timeout(Duration::from_millis(300), watch_other.next()).await {
        panic!("another drain's watch saw progress: {got:?}");
    }
}
