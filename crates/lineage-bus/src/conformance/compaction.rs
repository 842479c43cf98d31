//! The log compaction cases of the suite (issue 35): [`crate::ports::EventLog::compact`] and
//! [`crate::ports::EventLog::drop_superseded`].

use lineage_core::log::SessionEvent;

use super::{conflict, event, seqs, sid, Backend};
use crate::events::{LogCursor, COMPACTION_MAX_BYTES};

/// Appends `seqs` to `sid(n)` one event per unit, fenced, from `cursor`.
async fn append_each(
    b: &dyn Backend,
    n: u32,
    seqs: std::ops::RangeInclusive<u64>,
    mut cursor: LogCursor,
) -> LogCursor {
    let log = b.events().await;
    for seq in seqs {
        cursor = log
            .append(&sid(n), &event(seq), Some(cursor))
            .await
            .expect("append");
    }
    cursor
}

/// A compaction restates the whole log as one unit: a read meets every event once before the
/// units it supersedes are dropped and after, with the compaction's cursor; the log goes on
/// after it; dropping again keeps what was appended since; other logs are untouched.
pub async fn log_compaction_restates_the_log_once(b: &dyn Backend) {
    let log = b.events().await;
    let mut cursor = LogCursor::default();
    for seq in 1..=20 {
        cursor = append_each(b, 7, seq..=seq, cursor).await;
        log.append(&sid(8), &event(seq), None)
            .await
            .expect("another session's append");
    }
    let before = log.read_log(&sid(7)).await.expect("read");
    assert_eq!(before.messages, 20);
    assert_eq!(before.cursor, cursor);
    let compacted = log
        .compact(&sid(7), &before.events, cursor)
        .await
        .expect("compact")
        .expect("twenty small events fit in one unit");
    assert_eq!(compacted.last_event_seq, 20);
    assert!(compacted.last_stream_seq > cursor.last_stream_seq);
    let both = log.read_log(&sid(7)).await.expect("read before the drop");
    assert_eq!(both.events, before.events, "each event once");
    assert_eq!((both.cursor, both.messages), (compacted, 21));
    log.drop_superseded(&sid(7), compacted)
        .await
        .expect("drop the superseded units");
    let after = b
        .events()
        .await
        .read_log(&sid(7))
        .await
        .expect("read after");
    assert_eq!(after.events, before.events);
    assert_eq!((after.cursor, after.messages), (compacted, 1));
    let (other, _) = log.read(&sid(8)).await.expect("the other log");
    assert_eq!(seqs(&other), (1..=20).collect::<Vec<_>>());
    // The log goes on after the compaction; a writer still holding the cursor before it is
    // fenced out.
    conflict(
        log.append(&sid(7), &event(21), Some(cursor)).await,
        "the cursor before the compaction",
    );
    let next = append_each(b, 7, 21..=21, compacted).await;
    log.drop_superseded(&sid(7), compacted)
        .await
        .expect("drop again");
    let last = log.read_log(&sid(7)).await.expect("read the last");
    assert_eq!(seqs(&last.events), (1..=21).collect::<Vec<_>>());
    assert_eq!((last.cursor, last.messages), (next, 2));
}

/// A compaction at a stale cursor is refused and changes nothing; a retried one (its ack lost)
/// is recognised; one larger than [`COMPACTION_MAX_BYTES`] writes nothing and says so.
pub async fn log_compaction_is_fenced_and_bounded(b: &dyn Backend) {
    let log = b.events().await;
    let cursor = append_each(b, 5, 1..=4, LogCursor::default()).await;
    let read = log.read_log(&sid(5)).await.expect("read");
    let stale = LogCursor {
        last_stream_seq: cursor.last_stream_seq - 1,
        ..cursor
    };
    match log.compact(&sid(5), &read.events, stale).await {
        Err(crate::error::BusError::LogConflict { .. }) => {}
        other => panic!("a stale compaction: expected a log conflict, got {other:?}"),
    }
    assert_eq!(log.read_log(&sid(5)).await.expect("read"), read);
    let first = log.compact(&sid(5), &read.events, cursor).await;
    let retried = log.compact(&sid(5), &read.events, cursor).await;
    match (&first, &retried) {
        (Ok(Some(a)), Ok(Some(b))) => assert_eq!(a, b, "a retry is the same unit"),
        other => panic!("compact and its retry: {other:?}"),
    }
    assert_eq!(log.read_log(&sid(5)).await.expect("read").messages, 5);
    // Three events of a third of the bound each: the whole is over it.
    let big = |seq: u64| SessionEvent {
        data: serde_json::json!({ "text": "x".repeat(COMPACTION_MAX_BYTES / 3 + 1) }),
        ..event(seq)
    };
    let mut cursor = LogCursor::default();
    for seq in 1..=3 {
        cursor = log
            .append(&sid(6), &big(seq), Some(cursor))
            .await
            .expect("append a large event");
    }
    let read = log.read_log(&sid(6)).await.expect("read the large log");
    assert_eq!(
        log.compact(&sid(6), &read.events, cursor)
            .await
            .expect("compact a large log"),
        None
    );
    assert_eq!(log.read_log(&sid(6)).await.expect("read again"), read);
}
