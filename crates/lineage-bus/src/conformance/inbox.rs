//! The inbox cases of the suite: purge, dedup by message id, in-order delivery, redelivery
//! of what is not acknowledged (and not before an in-progress wait; at once after a nak), a
//! consumer reopened.

use super::*;

/// Q5: a purged parent's inbox holds nothing (a new consumer gets nothing); another parent's
/// messages are still delivered.
pub async fn inbox_purge_removes_only_the_purged_parents(b: &dyn Backend) {
    let inbox = b.inbox().await;
    for seq in 1..=3 {
        inbox
            .publish(&report(seq), None)
            .await
            .expect("publish to 1");
        inbox
            .publish(&report_to(sid(3), seq), None)
            .await
            .expect("publish to 3");
    }
    // Parent 1 had a consumer, part read.
    let mut reader = inbox.consumer(&sid(1)).await.expect("consumer 1");
    next_within(reader.as_mut(), DELIVERY, "before the purge")
        .await
        .ack()
        .await
        .expect("ack");
    drop(reader);
    inbox.purge(&[sid(1), sid(9)]).await.expect("purge");
    let mut reader = b
        .inbox()
        .await
        .consumer(&sid(1))
        .await
        .expect("consumer 1 again");
    nothing_within(
        reader.as_mut(),
        Duration::from_millis(500),
        "a purged inbox",
    )
    .await;
    let mut other = inbox.consumer(&sid(3)).await.expect("consumer 3");
    for seq in 1..=3 {
        let d = next_within(other.as_mut(), DELIVERY, "the kept inbox").await;
        assert_eq!(seq_of(&d), seq);
        d.ack().await.expect("ack");
    }
    inbox.purge(&[sid(1)]).await.expect("purge again");
}

/// A second copy of a message (same dedup id) is recognised as a duplicate and never
/// delivered.
pub async fn inbox_dedup_by_message_id(b: &dyn Backend) {
    let inbox = b.inbox().await;
    let first = inbox.publish(&report(1), None).await.expect("publish 1");
    let retry = inbox
        .publish(&report(1), None)
        .await
        .expect("publish 1 again");
    assert!(!first.duplicate);
    assert!(retry.duplicate, "the retried publish must be suppressed");
    assert_eq!(
        retry.sequence, first.sequence,
        "a duplicate names the original"
    );
    // Another handle (a retry from another process) is deduplicated too.
    let other = b.inbox().await;
    assert!(
        other
            .publish(&report(1), None)
            .await
            .expect("again")
            .duplicate
    );
    let second = inbox.publish(&report(2), None).await.expect("publish 2");
    assert!(!second.duplicate);
    let mut reader = inbox.consumer(&sid(1)).await.expect("consumer");
    for seq in [1, 2] {
        let d = next_within(reader.as_mut(), DELIVERY, "dedup").await;
        assert_eq!(seq_of(&d), seq);
        d.ack().await.expect("ack");
    }
    nothing_within(reader.as_mut(), Duration::from_millis(500), "a third copy").await;
}

/// Messages come in publish order, only the consumer's parent's, with their trace context.
pub async fn inbox_in_order_delivery(b: &dyn Backend) {
    let inbox = b.inbox().await;
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    for seq in 1..=20 {
        inbox
            .publish(&report(seq), (seq == 3).then_some(tp))
            .await
            .expect("publish");
        if seq % 4 == 0 {
            inbox
                .publish(&report_to(sid(5), seq), None)
                .await
                .expect("publish to another parent");
        }
    }
    let mut reader = inbox.consumer(&sid(1)).await.expect("consumer");
    for seq in 1..=20 {
        let d = next_within(reader.as_mut(), DELIVERY, "in order").await;
        assert_eq!(seq_of(&d), seq);
        assert_eq!(
            d.message
                .as_ref()
                .map(|m| m.parent_session_id().clone())
                .ok(),
            Some(sid(1))
        );
        assert_eq!(d.traceparent().as_deref(), (seq == 3).then_some(tp));
        assert_eq!(d.trace_context().is_some(), seq == 3);
        d.ack().await.expect("ack");
    }
    nothing_within(reader.as_mut(), Duration::from_millis(300), "after 20").await;
    let mut other = inbox.consumer(&sid(5)).await.expect("other consumer");
    for seq in [4, 8, 12, 16, 20] {
        let d = next_within(other.as_mut(), DELIVERY, "the other parent").await;
        assert_eq!(seq_of(&d), seq);
        d.ack().await.expect("ack");
    }
}

/// A message delivered but not acked comes again once its ack wait ran out; an acked one never
/// does.
pub async fn inbox_unacked_redelivery(b: &dyn Backend) {
    let inbox = b.inbox().await;
    let mut reader = inbox.consumer(&sid(1)).await.expect("consumer");
    inbox.publish(&report(1), None).await.expect("publish 1");
    inbox.publish(&report(2), None).await.expect("publish 2");
    let one = next_within(reader.as_mut(), DELIVERY, "first").await;
    assert_eq!(seq_of(&one), 1);
    one.ack().await.expect("ack 1");
    let two = next_within(reader.as_mut(), DELIVERY, "second").await;
    assert_eq!(seq_of(&two), 2);
    drop(two); // never acked: the parent crashed before accepting it
    let again = next_within(reader.as_mut(), b.ack_wait() * 3, "redelivery").await;
    assert_eq!(seq_of(&again), 2, "only the unacked message comes back");
    again.ack().await.expect("ack the redelivery");
    nothing_within(reader.as_mut(), b.ack_wait() * 2, "after every ack").await;
}

/// A message marked in progress is not redelivered while its (restarted) ack wait runs.
pub async fn inbox_in_progress_defers_redelivery(b: &dyn Backend) {
    let wait = b.ack_wait();
    let inbox = b.inbox().await;
    let mut reader = inbox.consumer(&sid(1)).await.expect("consumer");
    inbox.publish(&report(1), None).await.expect("publish");
    let d = next_within(reader.as_mut(), DELIVERY, "first").await;
    tokio::time::sleep(wait * 6 / 10).await;
    d.in_progress().await.expect("in progress");
    // Past the first ack wait, inside the restarted one: nothing comes again.
    nothing_within(reader.as_mut(), wait * 6 / 10, "while in progress").await;
    let again = next_within(reader.as_mut(), wait * 3, "redelivery after the new wait").await;
    assert_eq!(seq_of(&again), 1);
    again.ack().await.expect("ack");
}

/// A message given back (nak) by one reader comes again after the short nak delay, long before
/// its ack wait, to
/// another reader of the same consumer: a host that must not take it hands it to the one that
/// may (issue 12: two hosts of one parent while a lapsed lease is noticed).
pub async fn inbox_nak_redelivers_at_once(b: &dyn Backend) {
    let inbox = b.inbox().await;
    let mut first = inbox.consumer(&sid(1)).await.expect("consumer");
    inbox.publish(&report(1), None).await.expect("publish");
    let d = next_within(first.as_mut(), DELIVERY, "first").await;
    let mut second = inbox.consumer(&sid(1)).await.expect("a second reader");
    // The reader stops first (else the message may come back to its own pending pull).
    drop(first);
    d.nak().await.expect("nak");
    let naked = tokio::time::Instant::now();
    let again = next_within(second.as_mut(), b.ack_wait() * 3, "the nak'd message").await;
    assert_eq!(seq_of(&again), 1);
    assert!(
        naked.elapsed() < b.ack_wait(),
        "the nak'd message came {:?} after the nak: not before its ack wait ({:?})",
        naked.elapsed(),
        b.ack_wait()
    );
    again.ack().await.expect("ack");
    nothing_within(second.as_mut(), b.ack_wait() * 2, "after the ack").await;
}

/// A durable consumer outlives its reader and its connection: re-opened from another handle,
/// it delivers what was never acked and what came meanwhile, never what was acked. Deleted, it
/// is forgotten (a new one starts from the first message); deleting none is fine.
pub async fn inbox_consumer_survives_reopen(b: &dyn Backend) {
    {
        let inbox = b.inbox().await;
        let mut reader = inbox.consumer(&sid(1)).await.expect("consumer");
        inbox.publish(&report(1), None).await.expect("publish 1");
        next_within(reader.as_mut(), DELIVERY, "first")
            .await
            .ack()
            .await
            .expect("ack 1");
        inbox.publish(&report(2), None).await.expect("publish 2");
        let _unacked = next_within(reader.as_mut(), DELIVERY, "second").await;
        drop(reader);
        inbox.publish(&report(3), None).await.expect("publish 3");
    }
    let inbox = b.inbox().await;
    let mut reader = inbox.consumer(&sid(1)).await.expect("re-open");
    let mut got = Vec::new();
    for _ in 0..2 {
        let d = next_within(reader.as_mut(), b.ack_wait() * 3, "after re-open").await;
        got.push(seq_of(&d));
        d.ack().await.expect("ack");
    }
    got.sort();
    assert_eq!(got, vec![2, 3]);
    nothing_within(reader.as_mut(), b.ack_wait() * 2, "after re-open").await;
    drop(reader);
    inbox.delete_consumer(&sid(1)).await.expect("delete");
    inbox
        .delete_consumer(&sid(1))
        .await
        .expect("delete a consumer that is gone");
    assert_eq!(
        inbox
            .delete_consumers(&[sid(1), sid(6)])
            .await
            .expect("delete none"),
        0
    );
    let mut fresh = inbox.consumer(&sid(1)).await.expect("a new consumer");
    let d = next_within(fresh.as_mut(), DELIVERY, "a new consumer").await;
    assert_eq!(
        seq_of(&d),
        1,
        "a new consumer starts from the first message"
    );
    let _ = inbox.consumer(&sid(6)).await.expect("another consumer");
    assert_eq!(
        inbox
            .delete_consumers(&[sid(1), sid(6), sid(7)])
            .await
            .expect("delete two"),
        2
    );
}
