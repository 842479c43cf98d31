//! A control request waits for its own deadline, not the NATS client's 10 s default (N3).

use std::time::Duration;

use futures::StreamExt;
use lineage_bus::control::{self, ErrorCode};
use lineage_testkit::NatsServer;

#[tokio::test]
async fn n3_control_request_honours_a_deadline_longer_than_the_client_default() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let mut sub = client.subscribe("lineage.t.ctl.slow").await.unwrap();
    let responder = client.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            tokio::time::sleep(Duration::from_millis(10_500)).await;
            if let Some(reply) = msg.reply {
                let body = control::encode_reply::<u32>(&Ok(7));
                let _ = responder.publish(reply, body.into()).await;
            }
        }
    });
    client.flush().await.unwrap();
    let value: u32 = control::request(
        &client,
        "lineage.t.ctl.slow".into(),
        &serde_json::json!({}),
        Duration::from_secs(20),
    )
    .await
    .expect("a 20 s deadline outlives a 10.5 s reply");
    assert_eq!(value, 7);

    let err = control::request::<_, u32>(
        &client,
        "lineage.t.ctl.slow".into(),
        &serde_json::json!({}),
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("within 300 ms"), "{}", err.message);
}
