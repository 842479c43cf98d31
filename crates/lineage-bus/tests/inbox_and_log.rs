//! The parent inbox and the session event log against a real nats-server with JetStream.

use std::time::Duration;

use lineage_bus::events::{EventLogStore, LogCursor};
use lineage_bus::inbox::ParentInbox;
use lineage_bus::{BusError, Subjects};
use lineage_core::log::SessionEvent;
use lineage_core::messages::{Delivery, InboxMessage, StopReason, SubagentReport, SubagentSettled};
use lineage_testkit::NatsServer;

use lineage_core::ids::sid;

fn report(seq: u64, content: &str) -> InboxMessage {
    InboxMessage::Report(SubagentReport {
        sender_session_id: sid(2),
        parent_session_id: sid(1),
        seq,
        content: content.into(),
        delivery: Delivery::Quiet,
        at_ms: 1,
    })
}

async fn next(
    consumer: &mut lineage_bus::inbox::InboxConsumer,
) -> lineage_bus::inbox::InboxDelivery {
    tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .expect("a message within 5 s")
        .expect("consumer open")
        .expect("delivered")
}

#[tokio::test]
async fn n2_retried_publish_is_dropped_by_message_id() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let inbox = ParentInbox::open(client, Subjects::new("t").unwrap())
        .await
        .unwrap();
    let first = inbox.publish(&report(1, "a"), None).await.unwrap();
    let retry = inbox.publish(&report(1, "a"), None).await.unwrap();
    assert!(!first.duplicate);
    assert!(retry.duplicate, "the retried publish must be suppressed");
    let second = inbox.publish(&report(2, "b"), None).await.unwrap();
    assert!(!second.duplicate);
    let mut consumer = inbox.consumer(&sid(1)).await.unwrap();
    let one = next(&mut consumer).await;
    assert_eq!(
        one.message.as_ref().unwrap().dedup_id(),
        format!("{}-1", sid(2))
    );
    one.ack().await.unwrap();
    let two = next(&mut consumer).await;
    assert_eq!(
        two.message.as_ref().unwrap().dedup_id(),
        format!("{}-2", sid(2))
    );
    two.ack().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), consumer.next())
            .await
            .is_err(),
        "no third message"
    );
}

#[tokio::test]
async fn n2_cold_parent_gets_unacked_messages_when_it_comes_back() {
    let server = NatsServer::start().unwrap();
    let subjects = Subjects::new("t").unwrap();
    {
        let client = async_nats::connect(server.url()).await.unwrap();
        let inbox = ParentInbox::open(client.clone(), subjects.clone())
            .await
            .unwrap();
        let mut consumer = inbox.consumer(&sid(1)).await.unwrap();
        inbox.publish(&report(1, "seen"), None).await.unwrap();
        next(&mut consumer).await.ack().await.unwrap();
        // The parent goes cold: this one arrives while it is down, and one is delivered but
        // never acked (the parent crashed before accepting it).
        inbox.publish(&report(2, "unacked"), None).await.unwrap();
        let _unacked = next(&mut consumer).await;
        inbox
            .publish(
                &InboxMessage::Settled(SubagentSettled::new(
                    sid(2),
                    sid(1),
                    3,
                    "child done",
                    StopReason::Completed,
                    None,
                    2,
                )),
                None,
            )
            .await
            .unwrap();
        drop(consumer);
        client.flush().await.unwrap();
    }
    // A new process (new connection) re-opens the durable consumer.
    let client = async_nats::connect(server.url()).await.unwrap();
    let inbox = ParentInbox::open(client, subjects).await.unwrap();
    let mut consumer = inbox.consumer(&sid(1)).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        // The unacked one comes back after ack_wait at the latest; allow for it.
        let d = tokio::time::timeout(Duration::from_secs(40), consumer.next())
            .await
            .expect("redelivery")
            .unwrap()
            .unwrap();
        got.push(d.message.as_ref().unwrap().dedup_id());
        d.ack().await.unwrap();
    }
    got.sort();
    assert_eq!(got, vec![format!("{}-2", sid(2)), format!("{}-3", sid(2))]);
}

#[tokio::test]
async fn n2_malformed_inbox_payload_is_reported_not_panicked() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let subjects = Subjects::new("t").unwrap();
    let inbox = ParentInbox::open(client.clone(), subjects.clone())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(client);
    js.publish(subjects.parent_inbox(&sid(1)), "{not json".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut consumer = inbox.consumer(&sid(1)).await.unwrap();
    let d = next(&mut consumer).await;
    let err = d.message.as_ref().expect_err("decode error").to_string();
    assert!(err.contains("invalid"), "{err}");
    d.ack().await.unwrap();
}

#[tokio::test]
async fn k1_session_log_reads_back_in_order_and_refuses_a_second_writer() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let store = EventLogStore::open(client, Subjects::new("t").unwrap())
        .await
        .unwrap();
    let (empty, cursor) = store.read(&sid(7)).await.unwrap();
    assert!(empty.is_empty());
    assert_eq!(cursor, LogCursor::default());
    let mut cursor = Some(cursor);
    for seq in 1..=100u64 {
        let event = SessionEvent {
            seq,
            kind: "turn/user".into(),
            data: serde_json::json!({"n": seq}),
            at_ms: seq,
        };
        cursor = Some(store.append(&sid(7), &event, cursor).await.unwrap());
    }
    // Another session's log does not mix in.
    let other = SessionEvent {
        seq: 1,
        kind: "x".into(),
        data: serde_json::json!(null),
        at_ms: 0,
    };
    store.append(&sid(8), &other, None).await.unwrap();
    let (events, read_cursor) = store.read(&sid(7)).await.unwrap();
    assert_eq!(events.len(), 100);
    assert!(events
        .iter()
        .enumerate()
        .all(|(i, e)| e.seq == i as u64 + 1));
    assert_eq!(Some(read_cursor), cursor);
    // A writer holding a stale cursor loses.
    let stale = LogCursor {
        last_stream_seq: 1,
        last_event_seq: 1,
    };
    let event = SessionEvent {
        seq: 101,
        kind: "turn/user".into(),
        data: serde_json::json!(1),
        at_ms: 0,
    };
    match store.append(&sid(7), &event, Some(stale)).await {
        Err(BusError::LogConflict { .. }) => {}
        other => panic!("expected a log conflict, got {other:?}"),
    }
}

fn user_event(seq: u64) -> SessionEvent {
    SessionEvent {
        seq,
        kind: "turn/user".into(),
        data: serde_json::json!({"n": seq}),
        at_ms: seq,
    }
}

#[tokio::test]
async fn k1_batched_appends_read_back_as_one_ordered_log_and_are_fenced_as_a_whole() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let store = EventLogStore::open(client, Subjects::new("t").unwrap())
        .await
        .unwrap();
    // 1 alone, 2..=4 as a batch, 5 alone, 6..=10 as a batch: four messages, ten events.
    let mut cursor = LogCursor::default();
    for range in [1..=1u64, 2..=4, 5..=5, 6..=10] {
        let events: Vec<SessionEvent> = range.map(user_event).collect();
        cursor = store
            .append_all(&sid(9), &events, Some(cursor))
            .await
            .unwrap();
    }
    // Appending nothing is a no-op that keeps the cursor.
    assert_eq!(
        store.append_all(&sid(9), &[], Some(cursor)).await.unwrap(),
        cursor
    );
    let (events, read_cursor) = store.read(&sid(9)).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    assert_eq!(events[3], user_event(4));
    assert_eq!(read_cursor, cursor);
    // A batch from a stale writer is refused whole: none of its events lands.
    let stale = LogCursor {
        last_stream_seq: cursor.last_stream_seq - 1,
        ..cursor
    };
    let batch: Vec<SessionEvent> = (11..=13).map(user_event).collect();
    match store.append_all(&sid(9), &batch, Some(stale)).await {
        Err(BusError::LogConflict { .. }) => {}
        other => panic!("expected a log conflict, got {other:?}"),
    }
    let (events, _) = store.read(&sid(9)).await.unwrap();
    assert_eq!(events.len(), 10);
    // A retried batch (same events, same cursor) is deduplicated, not appended twice.
    let next = store
        .append_all(&sid(9), &batch, Some(cursor))
        .await
        .unwrap();
    let again = store.append_all(&sid(9), &batch, Some(cursor)).await;
    assert!(
        matches!(again, Ok(c) if c == next),
        "retry: {again:?}, first: {next:?}"
    );
    let (events, _) = store.read(&sid(9)).await.unwrap();
    assert_eq!(events.len(), 13);
}

#[tokio::test]
async fn k1_a_log_longer_than_one_read_batch_reads_whole_and_in_order() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let store = EventLogStore::open(client, Subjects::new("t").unwrap())
        .await
        .unwrap();
    let n = lineage_bus::events::READ_BATCH as u64 * 2 + 44;
    let mut cursor = LogCursor::default();
    for seq in 1..=n {
        cursor = store
            .append(&sid(3), &user_event(seq), Some(cursor))
            .await
            .unwrap();
        // Another session's messages interleave on the stream.
        if seq % 7 == 0 {
            store
                .append(&sid(4), &user_event(seq / 7), None)
                .await
                .unwrap();
        }
    }
    let (events, read_cursor) = store.read(&sid(3)).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=n).collect::<Vec<_>>()
    );
    assert_eq!(read_cursor, cursor);
    let (other, _) = store.read(&sid(4)).await.unwrap();
    assert_eq!(other.len() as u64, n / 7);
}

#[tokio::test]
async fn k1_a_stream_created_without_direct_gets_is_upgraded_and_read() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let subjects = Subjects::new("t").unwrap();
    // As an older build created it.
    let js = async_nats::jetstream::new(client.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: subjects.events_stream(),
        subjects: vec![subjects.all_session_events()],
        ..Default::default()
    })
    .await
    .unwrap();
    let store = EventLogStore::open(client, subjects).await.unwrap();
    let cursor = store
        .append_all(&sid(5), &[user_event(1), user_event(2)], None)
        .await
        .unwrap();
    let (events, read_cursor) = store.read(&sid(5)).await.unwrap();
    assert_eq!(events, vec![user_event(1), user_event(2)]);
    assert_eq!(read_cursor, cursor);
}

#[tokio::test]
async fn l3_a_follower_gets_each_event_once_across_a_compaction() {
    let server = NatsServer::start().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let store = EventLogStore::open(client, Subjects::new("t").unwrap())
        .await
        .unwrap();
    let mut cursor = LogCursor::default();
    for seq in 1..=10 {
        cursor = store
            .append(&sid(6), &user_event(seq), Some(cursor))
            .await
            .unwrap();
    }
    // A follower (`lineage logs -f`) has read the first ten events.
    let (seen, followed) = store.read(&sid(6)).await.unwrap();
    assert_eq!(seen.len(), 10);
    // The writer compacts, appends two more, and drops what the compaction restates.
    let all = (1..=10).map(user_event).collect::<Vec<_>>();
    let compacted = store
        .compact(&sid(6), &all, cursor)
        .await
        .unwrap()
        .expect("fits");
    let tail = store
        .append_all(&sid(6), &[user_event(11), user_event(12)], Some(compacted))
        .await
        .unwrap();
    // Before the drop: the compaction restates 1..=10; the follower gets only 11 and 12.
    let (new, next) = store.read_after(&sid(6), followed).await.unwrap();
    assert_eq!(new, vec![user_event(11), user_event(12)]);
    assert_eq!(next, tail);
    store.drop_superseded(&sid(6), compacted).await.unwrap();
    let (none, same) = store.read_after(&sid(6), next).await.unwrap();
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(same, tail);
    // A reader from the start: every event once, in two messages.
    let read = store.read_log(&sid(6)).await.unwrap();
    assert_eq!(read.events, (1..=12).map(user_event).collect::<Vec<_>>());
    assert_eq!((read.cursor, read.messages), (tail, 2));
}
