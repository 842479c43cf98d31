//! O3 (issue 15): a parent's durable inbox consumer names its session, against a real
//! nats-server with JetStream:
//! - a new consumer `inbox-<parent>` has the description `lineage inbox of session <parent>
//!   (cluster <cluster>)` (`nats consumer info` shows it);
//! - one made without a description (by an older node) gets it when the parent opens it again,
//!   and keeps its messages and ack floor: an acked message is not offered again, an unacked one
//!   is.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use lineage_bus::inbox::{InboxConsumer, InboxDelivery, ParentInbox};
use lineage_bus::Subjects;
use lineage_core::ids::SessionId;
use lineage_core::messages::{Delivery, InboxMessage, SubagentReport};
use lineage_testkit::NatsServer;

use lineage_core::ids::sid;

fn report(parent: &SessionId, seq: u64) -> InboxMessage {
    InboxMessage::Report(SubagentReport {
        sender_session_id: sid(99),
        parent_session_id: parent.clone(),
        seq,
        content: format!("report {seq}"),
        delivery: Delivery::Quiet,
        at_ms: 1,
    })
}

async fn next(consumer: &mut InboxConsumer) -> InboxDelivery {
    tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .expect("a message within 5 s")
        .expect("consumer open")
        .expect("delivered")
}

async fn description(js: &jetstream::Context, name: &str) -> Option<String> {
    let stream = js.get_stream("LINEAGE_T_INBOX").await.unwrap();
    stream
        .consumer_info(name)
        .await
        .unwrap()
        .config
        .description
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o3_inbox_consumers_are_described_by_their_session() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let subjects = Subjects::new("t").unwrap();
    let inbox = ParentInbox::open(client.clone(), subjects.clone())
        .await
        .unwrap();
    let js = jetstream::new(client.clone());

    // A new consumer.
    let parent = sid(1);
    let _consumer = inbox.consumer(&parent).await.unwrap();
    let expected = format!("lineage inbox of session {parent} (cluster t)");
    assert_eq!(inbox.consumer_description(&parent), expected);
    assert_eq!(
        description(&js, &format!("inbox-{parent}")).await,
        Some(expected)
    );

    // One an older node made, without a description, with one message acked and one not.
    let old = sid(2);
    let name = format!("inbox-{old}");
    let stream = js.get_stream("LINEAGE_T_INBOX").await.unwrap();
    let older: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(name.clone()),
            filter_subject: subjects.parent_inbox(&old),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: lineage_bus::inbox::ACK_WAIT,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(description(&js, &name).await, None);
    inbox.publish(&report(&old, 1), None).await.unwrap();
    inbox.publish(&report(&old, 2), None).await.unwrap();
    // The older node read and acked the first message only.
    let mut batch = older
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(5))
        .messages()
        .await
        .unwrap();
    let first = batch.next().await.unwrap().unwrap();
    let first_report: InboxMessage = serde_json::from_slice(&first.payload).unwrap();
    assert_eq!(first_report, report(&old, 1));
    first.ack().await.unwrap();
    drop(batch);

    // The parent opens it again here: described now, the same messages and ack floor.
    let mut reader = inbox.consumer(&old).await.unwrap();
    assert_eq!(
        description(&js, &name).await,
        Some(format!("lineage inbox of session {old} (cluster t)"))
    );
    let second = next(&mut reader).await;
    assert_eq!(second.message.as_ref().unwrap(), &report(&old, 2));
    second.ack().await.unwrap();
    // An ack is a plain publish: the server applies it a moment later.
    let mut info = stream.consumer_info(&name).await.unwrap();
    for _ in 0..50 {
        if info.num_ack_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        info = stream.consumer_info(&name).await.unwrap();
    }
    assert_eq!(info.num_ack_pending, 0, "{info:?}");
    assert_eq!(info.num_pending, 0, "{info:?}");
    assert_eq!(info.ack_floor.stream_sequence, 2, "{info:?}");
}
