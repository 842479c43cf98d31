//! O3, N3 (issue 15): error replies of the `lineage` service against a real nats-server. A
//! node serves the service through [`NatsControl`] and answers each call with the reply its
//! body asks for; then:
//! - an error reply carries `Nats-Service-Error-Code` (400, 404, 409, 503, 500) and
//!   `Nats-Service-Error` (the message), and its body is still the one-line JSON envelope
//!   (`{"v":1,"error":{"code","message"}}`), byte for byte; a result carries neither header;
//! - the client gets exactly one message per request (async-nats' own empty copy of an error
//!   reply goes to `lineage.<cluster>.node.<node>.errors`, never to the client);
//! - [`ControlClient`] and the request helpers (plain and with heartbeats) read the error from
//!   the body as before;
//! - `$SRV.STATS.lineage` counts every error (`num_errors`, `last_error`) and every request;
//! - a node whose endpoints stop leaves the service (`$SRV.PING.lineage` unanswered) while its
//!   connection stays open.

use std::time::Duration;

use futures::StreamExt;
use lineage_bus::control::{self, ControlError, ErrorCode, Hop, Watch};
use lineage_bus::transport::NatsControl;
use lineage_bus::{ControlClient, ControlTransport, Subjects};
use lineage_core::ids::NodeId;
use lineage_testkit::NatsServer;
use serde_json::{json, Value};

/// Serves every op of node `node-1` of cluster `t`: a body `{"fail": CODE, "message": M}` is
/// answered with that error, a `resume` with `not_found`, anything else with a `status` result.
async fn serve(client: async_nats::Client) {
    let transport = NatsControl::new(client, Subjects::new("t").unwrap());
    let node = NodeId::parse("node-1").unwrap();
    let mut endpoints = transport.serve(&node).await.unwrap();
    tokio::spawn(async move {
        let _transport = transport;
        while let Some(incoming) = endpoints.next().await {
            let asked: Value = serde_json::from_slice(&incoming.call.body).unwrap_or(Value::Null);
            let body = match serde_json::from_value::<ErrorCode>(asked["fail"].clone()) {
                Ok(code) => control::encode_reply::<()>(&Err(ControlError::new(
                    code,
                    asked["message"].as_str().unwrap_or("failed"),
                ))),
                Err(_) if incoming.call.op == "resume" => control::encode_reply::<()>(&Err(
                    ControlError::new(ErrorCode::NotFound, "no session to resume"),
                )),
                Err(_) => control::encode_reply(&Ok(
                    json!({"node": "node-1", "cluster": "t", "live": []}),
                )),
            };
            (incoming.respond)(body).await.unwrap();
        }
    });
}

fn fail(code: &str, message: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"fail": code, "message": message})).unwrap()
}

/// Every message that arrives on a fresh inbox for one request to `subject`, within 500 ms.
async fn replies(
    client: &async_nats::Client,
    subject: &str,
    body: Vec<u8>,
) -> Vec<async_nats::Message> {
    let inbox = client.new_inbox();
    let mut sub = client.subscribe(inbox.clone()).await.unwrap();
    client
        .publish_with_reply(subject.to_owned(), inbox, body.into())
        .await
        .unwrap();
    let mut got = Vec::new();
    let end = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Some(msg)) = tokio::time::timeout_at(end, sub.next()).await {
        got.push(msg);
    }
    got
}

fn header(msg: &async_nats::Message, name: &str) -> Option<String> {
    msg.headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o3_error_replies_set_the_service_error_headers_keep_their_json_body_and_are_counted() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    serve(async_nats::connect(server.url()).await.unwrap()).await;
    // What goes to the sink: async-nats' own copy of each error reply.
    let mut sink = client
        .subscribe("lineage.t.node.node-1.errors")
        .await
        .unwrap();
    client.flush().await.unwrap();

    let cases = [
        ("bad_request", 400, "lineage.t.ctl.spawn"),
        ("not_found", 404, "lineage.t.ctl.followup"),
        ("refused", 409, "lineage.t.ctl.interrupt"),
        ("unavailable", 503, "lineage.t.node.node-1.start"),
        ("internal", 500, "lineage.t.ctl.status"),
    ];
    for (code, status, subject) in cases {
        let message = format!("{code} on {subject}: one line");
        let got = replies(&client, subject, fail(code, &message)).await;
        assert_eq!(got.len(), 1, "{subject}: one message, got {got:?}");
        let reply = &got[0];
        assert_eq!(
            header(reply, "Nats-Service-Error-Code").as_deref(),
            Some(status.to_string().as_str()),
            "{subject}: {reply:?}"
        );
        assert_eq!(
            header(reply, "Nats-Service-Error").as_deref(),
            Some(message.as_str()),
            "{subject}"
        );
        let expected = control::encode_reply::<()>(&Err(ControlError::new(
            serde_json::from_value(json!(code)).unwrap(),
            message.clone(),
        )));
        assert_eq!(reply.payload.as_ref(), expected.as_slice(), "{subject}");
        let text = std::str::from_utf8(&reply.payload).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let body: Value = serde_json::from_str(text).unwrap();
        assert_eq!(body["error"]["code"], code);
        assert_eq!(body["error"]["message"], message.as_str());

        // The uncounted copy went to the sink: the same headers, an empty body.
        let copy = tokio::time::timeout(Duration::from_secs(2), sink.next())
            .await
            .expect("async-nats' copy of the error reply on the sink")
            .unwrap();
        assert!(copy.payload.is_empty(), "{copy:?}");
        assert_eq!(
            header(&copy, "Nats-Service-Error-Code").as_deref(),
            Some(status.to_string().as_str())
        );
    }

    // A result: no error headers, one message.
    let got = replies(&client, "lineage.t.ctl.status", b"{}".to_vec()).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(header(&got[0], "Nats-Service-Error"), None);
    assert_eq!(header(&got[0], "Nats-Service-Error-Code"), None);
    assert!(got[0].payload.starts_with(br#"{"v":1,"result":"#));

    // The clients read the error from the body, as before.
    let subject = "lineage.t.ctl.followup".to_owned();
    let e = control::request::<Value, Value>(
        &client,
        subject.clone(),
        &json!({"fail": "not_found", "message": "no session s"}),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert_eq!(e, ControlError::new(ErrorCode::NotFound, "no session s"));
    let watched = control::request_watched(
        &client,
        subject.clone(),
        fail("refused", "admission closed"),
        Duration::from_secs(5),
        Watch::default(),
        None,
        Hop::Client,
    )
    .await
    .unwrap();
    let e = control::decode_reply::<Value>(&subject, &watched).unwrap_err();
    assert_eq!(e, ControlError::new(ErrorCode::Refused, "admission closed"));
    // The typed client: an error, and a result.
    let typed = ControlClient::new(
        client.clone(),
        Subjects::new("t").unwrap(),
        Duration::from_secs(5),
    );
    let session =
        lineage_core::ids::SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap();
    let e = typed.resume(session).await.unwrap_err();
    assert_eq!(
        e,
        ControlError::new(ErrorCode::NotFound, "no session to resume")
    );
    let status = typed.status().await.unwrap();
    assert_eq!(status.cluster, "t");

    // $SRV.STATS.lineage: 5 + 3 errors, 5 + 1 + 3 + 1 requests.
    let stats = client
        .request("$SRV.STATS.lineage", "".into())
        .await
        .unwrap();
    let stats: Value = serde_json::from_slice(&stats.payload).unwrap();
    let endpoints = stats["endpoints"].as_array().unwrap();
    let sum = |field: &str| -> u64 {
        endpoints
            .iter()
            .map(|e| e[field].as_u64().unwrap_or(0))
            .sum()
    };
    assert_eq!(sum("num_errors"), 8, "{stats:#}");
    assert_eq!(sum("num_requests"), 10, "{stats:#}");
    let by_name = |name: &str| {
        endpoints
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no endpoint {name}: {stats:#}"))
    };
    assert_eq!(by_name("ctl-spawn")["num_errors"], 1, "{stats:#}");
    assert_eq!(
        by_name("ctl-spawn")["last_error"],
        "400:bad_request on lineage.t.ctl.spawn: one line"
    );
    assert_eq!(
        by_name("node-start")["last_error"],
        "503:unavailable on lineage.t.node.node-1.start: one line"
    );
    assert_eq!(by_name("ctl-interrupt")["num_errors"], 1, "{stats:#}");
    assert_eq!(by_name("ctl-followup")["num_errors"], 3, "{stats:#}");
    assert_eq!(
        by_name("ctl-followup")["last_error"],
        "409:admission closed"
    );
    assert_eq!(by_name("ctl-status")["num_errors"], 1, "{stats:#}");
    assert_eq!(by_name("ctl-status")["num_requests"], 3, "{stats:#}");
    assert_eq!(by_name("ctl-resume")["num_errors"], 1, "{stats:#}");
    assert_eq!(
        by_name("ctl-resume")["last_error"],
        "404:no session to resume"
    );
}

/// The `$SRV.PING.lineage` answers within 500 ms (not the server's no-responders status).
async fn pongs(client: &async_nats::Client) -> usize {
    replies(client, "$SRV.PING.lineage", Vec::new())
        .await
        .iter()
        .filter(|m| m.status.is_none() && !m.payload.is_empty())
        .count()
}

/// O3: a node that stops serving leaves the `lineage` service (`nats micro ls` no longer lists
/// it), although its connection stays open (a node winding down keeps it for its hand-off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o3_a_stopped_node_leaves_the_lineage_service() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let node_conn = async_nats::connect(server.url()).await.unwrap();
    let transport = NatsControl::new(node_conn.clone(), Subjects::new("t").unwrap());
    let endpoints = transport
        .serve(&NodeId::parse("node-1").unwrap())
        .await
        .unwrap();
    assert_eq!(pongs(&client).await, 1);
    endpoints.stop().await;
    node_conn.flush().await.unwrap();
    assert_eq!(
        pongs(&client).await,
        0,
        "the stopped node still answers $SRV.PING"
    );
    drop(transport);
}
