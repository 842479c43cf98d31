//! Proves the test helper: a real nats-server with JetStream, reached through async-nats.

use futures::StreamExt;
use lineage_testkit::NatsServer;

#[tokio::test]
async fn n1_smoke_publish_and_receive_through_a_real_nats_server() {
    let server = NatsServer::start().expect("start nats-server");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let mut sub = client
        .subscribe("lineage.smoke.>")
        .await
        .expect("subscribe");
    client
        .publish("lineage.smoke.hello", "hi".into())
        .await
        .expect("publish");
    client.flush().await.expect("flush");
    let msg = tokio::time::timeout(std::time::Duration::from_secs(5), sub.next())
        .await
        .expect("message within 5 s")
        .expect("stream open");
    assert_eq!(msg.subject.as_str(), "lineage.smoke.hello");
    assert_eq!(&msg.payload[..], b"hi");
}

#[tokio::test]
async fn n2_smoke_jetstream_is_enabled() {
    let server = NatsServer::start().expect("start nats-server");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let stream = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: "SMOKE".into(),
            subjects: vec!["smoke.>".into()],
            ..Default::default()
        })
        .await
        .expect("create stream");
    js.publish("smoke.a", "1".into())
        .await
        .expect("publish")
        .await
        .expect("ack");
    let info = stream.get_info().await.expect("info");
    assert_eq!(info.state.messages, 1);
}
