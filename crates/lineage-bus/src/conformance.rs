//! One conformance suite for the bus ports ([`crate::ports`]), run against the NATS
//! implementations (a real nats-server) and the in-memory twins ([`crate::memory`]) alike, as
//! openraft's `testing::Suite` or chitchat's `test_transport_suite` do.
//!
//! Each case is an async function taking a [`Backend`]; it panics (like an assertion) when the
//! implementation breaks the port's contract. [`crate::conformance_suite!`] expands to one test
//! per case; `tests/conformance_nats.rs` and `tests/conformance_memory.rs` run it against
//! their backend.

mod compaction;
mod control;
mod inbox;
mod workspace;

pub use compaction::{log_compaction_is_fenced_and_bounded, log_compaction_restates_the_log_once};

pub use control::{
    control_any_is_served_once, control_call_reaches_its_node,
    control_left_group_still_serves_its_own_calls, control_progress_reaches_watchers,
    control_unserved_is_unavailable,
};
pub use inbox::{
    inbox_consumer_survives_reopen, inbox_dedup_by_message_id, inbox_in_order_delivery,
    inbox_in_progress_defers_redelivery, inbox_nak_redelivers_at_once,
    inbox_purge_removes_only_the_purged_parents, inbox_unacked_redelivery,
};
pub use workspace::{workspace_purge_removes_only_the_purged_sessions, workspace_round_trip};

use std::sync::Arc;
use std::time::Duration;

use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{NodeId, RunId, SessionId};
use lineage_core::log::SessionEvent;
use lineage_core::messages::{
    Delivery, InboxMessage, LifecycleEvent, StopReason, SubagentReport, SubagentRunInfo,
};

use crate::error::BusError;
use crate::events::LogCursor;
use crate::inbox::InboxDelivery;
use crate::ports::{
    BoxFuture, ControlTransport, EventLog, Inbox, InboxReader, Lifecycle, LifecycleFeed,
};

/// What a suite case runs against: fresh handles on one store (for NATS, each on a new
/// connection to the same server, as a restarted process would have).
pub trait Backend: Send + Sync {
    /// A new handle on the session logs.
    fn events(&self) -> BoxFuture<'_, Arc<dyn EventLog>>;
    /// A new handle on the parent inboxes; its consumers redeliver after [`Backend::ack_wait`].
    fn inbox(&self) -> BoxFuture<'_, Arc<dyn Inbox>>;
    /// A new handle on the lifecycle events.
    fn lifecycle(&self) -> BoxFuture<'_, Arc<dyn Lifecycle>>;
    /// A new handle on the control transport.
    fn control(&self) -> BoxFuture<'_, Arc<dyn ControlTransport>>;
    /// A new handle on turn output.
    fn output(&self) -> BoxFuture<'_, Arc<dyn crate::ports::TurnOutputs>>;
    /// A new handle on the workspace snapshots.
    fn workspaces(&self) -> BoxFuture<'_, Arc<dyn crate::ports::WorkspaceStore>>;
    /// The ack wait of the inbox consumers [`Backend::inbox`] makes.
    fn ack_wait(&self) -> Duration;
}

pub use lineage_core::ids::sid;

/// Event `seq` of a log.
pub fn event(seq: u64) -> SessionEvent {
    SessionEvent {
        seq,
        kind: "turn/user".into(),
        data: serde_json::json!({ "n": seq }),
        at_ms: seq,
    }
}

/// Report `seq` from `sid(2)` to `sid(1)`.
pub fn report(seq: u64) -> InboxMessage {
    report_to(sid(1), seq)
}

/// Report `seq` from `sid(parent's number + 1)`: a dedup id of its own.
fn report_to(parent: SessionId, seq: u64) -> InboxMessage {
    let sender = if parent == sid(1) { sid(2) } else { sid(4) };
    InboxMessage::Report(SubagentReport {
        sender_session_id: sender,
        parent_session_id: parent,
        seq,
        content: format!("r{seq}"),
        delivery: Delivery::Quiet,
        at_ms: seq,
    })
}

fn seqs(events: &[SessionEvent]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

fn conflict(outcome: Result<LogCursor, BusError>, what: &str) {
    match outcome {
        Err(BusError::LogConflict { .. }) => {}
        other => panic!("{what}: expected a log conflict, got {other:?}"),
    }
}

/// The next delivery within `wait`, or a panic naming `what`.
async fn next_within(reader: &mut dyn InboxReader, wait: Duration, what: &str) -> InboxDelivery {
    tokio::time::timeout(wait, reader.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing delivered within {wait:?}"))
        .unwrap_or_else(|| panic!("{what}: the consumer closed"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Panics when anything is delivered within `wait`.
async fn nothing_within(reader: &mut dyn InboxReader, wait: Duration, what: &str) {
    if let Ok(got) = tokio::time::timeout(wait, reader.next()).await {
        panic!("{what}: expected nothing, got {got:?}");
    }
}

fn seq_of(d: &InboxDelivery) -> u64 {
    match d.message.as_ref() {
        Ok(m) => m.seq(),
        Err(e) => panic!("a malformed delivery: {e}"),
    }
}

const DELIVERY: Duration = Duration::from_secs(5);

/// Appends read back whole and in order, with the cursor to append after them; other sessions'
/// events never mix in.
pub async fn log_round_trip(b: &dyn Backend) {
    let log = b.events().await;
    let (empty, cursor) = log.read(&sid(7)).await.expect("read an empty log");
    assert!(empty.is_empty());
    assert_eq!(cursor, LogCursor::default());
    let mut cursor = cursor;
    for seq in 1..=20 {
        cursor = log
            .append(&sid(7), &event(seq), Some(cursor))
            .await
            .expect("append");
        if seq % 5 == 0 {
            log.append(&sid(8), &event(seq / 5), None)
                .await
                .expect("another session's append");
        }
    }
    let (events, read_cursor) = log.read(&sid(7)).await.expect("read");
    assert_eq!(seqs(&events), (1..=20).collect::<Vec<_>>());
    assert_eq!(events[4], event(5));
    assert_eq!(read_cursor, cursor);
    // Another handle (another process) reads the same log.
    let (again, _) = b.events().await.read(&sid(7)).await.expect("read again");
    assert_eq!(again, events);
    let (other, _) = log.read(&sid(8)).await.expect("read the other log");
    assert_eq!(seqs(&other), vec![1, 2, 3, 4]);
}

/// Q5: a purged session's log reads empty (from any handle); other sessions' logs are
/// untouched; purging again, or a session with no log, is not an error.
pub async fn log_purge_removes_only_the_purged_sessions(b: &dyn Backend) {
    let log = b.events().await;
    for seq in 1..=5 {
        log.append(&sid(7), &event(seq), None)
            .await
            .expect("append 7");
        log.append(&sid(8), &event(seq), None)
            .await
            .expect("append 8");
    }
    log.purge(&[sid(7), sid(9)]).await.expect("purge");
    let (gone, _) = b.events().await.read(&sid(7)).await.expect("read purged");
    assert!(gone.is_empty(), "{gone:?}");
    let (kept, _) = log.read(&sid(8)).await.expect("read kept");
    assert_eq!(seqs(&kept), (1..=5).collect::<Vec<_>>());
    log.purge(&[sid(7)]).await.expect("purge again");
    log.purge(&[]).await.expect("purge nothing");
}

/// A writer whose cursor is stale (another writer appended first) is refused and changes
/// nothing; so is one that believes an existing log is empty.
pub async fn log_conflicting_writer_refused(b: &dyn Backend) {
    let first = b.events().await;
    let second = b.events().await;
    let c1 = first
        .append(&sid(7), &event(1), Some(LogCursor::default()))
        .await
        .expect("first append");
    let c2 = second
        .append(&sid(7), &event(2), Some(c1))
        .await
        .expect("the other writer appends");
    // Its own event 2 (the same event would be recognised as a retry of the winner's).
    let mut mine = event(2);
    mine.data = serde_json::json!({"n": "the loser's"});
    conflict(first.append(&sid(7), &mine, Some(c1)).await, "stale cursor");
    conflict(
        first
            .append(&sid(7), &event(3), Some(LogCursor::default()))
            .await,
        "empty cursor on a non-empty log",
    );
    let (events, cursor) = first.read(&sid(7)).await.expect("read");
    assert_eq!(seqs(&events), vec![1, 2]);
    assert_eq!(cursor, c2);
    // The winner goes on.
    second
        .append(&sid(7), &event(3), Some(c2))
        .await
        .expect("the winner appends on");
}

/// A retried append (its ack lost) is recognised, with or without its expected cursor, and
/// stored once; a different append with the same seqs at a stale cursor is still refused.
pub async fn log_retried_append_recognised(b: &dyn Backend) {
    let log = b.events().await;
    let c1 = log
        .append(&sid(9), &event(1), Some(LogCursor::default()))
        .await
        .expect("append 1");
    let batch: Vec<SessionEvent> = (2..=4).map(event).collect();
    let c2 = log
        .append_all(&sid(9), &batch, Some(c1))
        .await
        .expect("append 2..=4");
    let retried = log.append_all(&sid(9), &batch, Some(c1)).await;
    assert!(
        matches!(retried, Ok(c) if c == c2),
        "a retry with its cursor: {retried:?}, first: {c2:?}"
    );
    let unfenced = log.append_all(&sid(9), &batch, None).await;
    assert!(
        matches!(unfenced, Ok(c) if c == c2),
        "a retry without a cursor: {unfenced:?}, first: {c2:?}"
    );
    // Same seqs (so the same id), other content: a fenced writer, not a retry.
    let mut other = batch.clone();
    other[1].data = serde_json::json!({"n": "someone else's"});
    conflict(
        log.append_all(&sid(9), &other, Some(c1)).await,
        "same id, other bytes",
    );
    let (events, cursor) = log.read(&sid(9)).await.expect("read");
    assert_eq!(seqs(&events), vec![1, 2, 3, 4]);
    assert_eq!(events[2], event(3));
    assert_eq!(cursor, c2);
}

/// A multi-event append lands whole or not at all; appending nothing keeps the cursor.
pub async fn log_multi_event_append_is_all_or_nothing(b: &dyn Backend) {
    let log = b.events().await;
    let mut cursor = LogCursor::default();
    for range in [1..=1u64, 2..=4, 5..=5, 6..=10] {
        let events: Vec<SessionEvent> = range.map(event).collect();
        cursor = log
            .append_all(&sid(3), &events, Some(cursor))
            .await
            .expect("append a batch");
    }
    assert_eq!(
        log.append_all(&sid(3), &[], Some(cursor))
            .await
            .expect("append nothing"),
        cursor
    );
    let stale = LogCursor {
        last_stream_seq: cursor.last_stream_seq - 1,
        ..cursor
    };
    let batch: Vec<SessionEvent> = (11..=13).map(event).collect();
    conflict(
        log.append_all(&sid(3), &batch, Some(stale)).await,
        "a stale batch",
    );
    let (events, read_cursor) = log.read(&sid(3)).await.expect("read");
    assert_eq!(seqs(&events), (1..=10).collect::<Vec<_>>());
    assert_eq!(read_cursor, cursor);
    let after = log
        .append_all(&sid(3), &batch, Some(cursor))
        .await
        .expect("the batch at the right cursor");
    let (events, read_cursor) = log.read(&sid(3)).await.expect("read");
    assert_eq!(seqs(&events), (1..=13).collect::<Vec<_>>());
    assert_eq!(read_cursor, after);
}

fn run_info(parent: SessionId, child: SessionId, n: u32) -> SubagentRunInfo {
    SubagentRunInfo {
        run_id: RunId::parse(&format!("01936c1e-7a3b-7cde-8f00-{:012}", 900 + n))
            .expect("a valid run id"),
        provider: "script".into(),
        child_id: child,
        parent_session_id: parent,
        local: true,
        shape: SubagentShape::Continuable,
        node: NodeId::parse("node-a").expect("a valid node id"),
        at_ms: u64::from(n),
    }
}

async fn next_event(feed: &mut dyn LifecycleFeed, what: &str) -> LifecycleEvent {
    tokio::time::timeout(DELIVERY, feed.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: no event within {DELIVERY:?}"))
        .unwrap_or_else(|| panic!("{what}: the feed closed"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A watch on a parent sees its children's start and end, in order, and nothing of another
/// parent's.
pub async fn lifecycle_publish_subscribe(b: &dyn Backend) {
    let bus = b.lifecycle().await;
    let mut on_p = bus.watch(&sid(1)).await.expect("watch P");
    let mut on_q = bus.watch(&sid(2)).await.expect("watch Q");
    let start = run_info(sid(1), sid(11), 1);
    let end = start.ended(StopReason::Completed, Some("done".into()), 5);
    let other = run_info(sid(2), sid(21), 2);
    bus.publish(&LifecycleEvent::Start(start.clone()))
        .await
        .expect("publish start");
    bus.publish(&LifecycleEvent::Start(other.clone()))
        .await
        .expect("publish Q's start");
    bus.publish(&LifecycleEvent::End(end.clone()))
        .await
        .expect("publish end");
    assert_eq!(
        next_event(on_p.as_mut(), "P's start").await,
        LifecycleEvent::Start(start)
    );
    assert_eq!(
        next_event(on_p.as_mut(), "P's end").await,
        LifecycleEvent::End(end)
    );
    assert_eq!(
        next_event(on_q.as_mut(), "Q's start").await,
        LifecycleEvent::Start(other)
    );
    if let Ok(got) = tokio::time::timeout(Duration::from_millis(300), on_p.next()).await {
        panic!("P saw more than its children's events: {got:?}");
    }
}

async fn next_output(
    feed: &mut dyn crate::ports::TurnOutputFeed,
    what: &str,
) -> lineage_core::output::TurnOutput {
    tokio::time::timeout(DELIVERY, feed.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {DELIVERY:?}"))
        .unwrap_or_else(|| panic!("{what}: the feed closed"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A watch on a session sees its output in publish order and nothing of another session's; a
/// watch on every session sees both (F1).
pub async fn output_publish_subscribe(b: &dyn Backend) {
    use lineage_core::output::{TurnEndOutcome, TurnOutput};
    let bus = b.output().await;
    let mut on_a = bus.watch(Some(&sid(1))).await.expect("watch A");
    let mut all = bus.watch(None).await.expect("watch all");
    let chunk = |s: u32, seq: u64| TurnOutput::Chunk {
        session_id: sid(s),
        turn: 0,
        seq,
        text: format!("t{seq}"),
    };
    let end = TurnOutput::TurnEnd {
        usage: None,
        session_id: sid(1),
        turn: 0,
        outcome: TurnEndOutcome::Completed,
        error: None,
        reply: Some("t1t2".into()),
        at_ms: 3,
    };
    let sent = [chunk(1, 1), chunk(2, 1), chunk(1, 2), end.clone()];
    for m in &sent {
        bus.publish(m).await.expect("publish output");
    }
    for want in [chunk(1, 1), chunk(1, 2), end] {
        assert_eq!(next_output(on_a.as_mut(), "A's output").await, want);
    }
    for want in sent {
        assert_eq!(
            next_output(all.as_mut(), "every session's output").await,
            want
        );
    }
    if let Ok(got) = tokio::time::timeout(Duration::from_millis(300), on_a.next()).await {
        panic!("A's watch saw another session's output: {got:?}");
    }
}

/// Expands to one `#[tokio::test]` per suite case, each running the case against the
/// [`Backend`] that `$make` (an async expression, evaluated once per test) builds:
///
/// ```ignore
/// lineage_bus::conformance_suite!(MemoryBackend::new());
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            log_round_trip,
            log_conflicting_writer_refused,
            log_retried_append_recognised,
            log_multi_event_append_is_all_or_nothing,
            log_purge_removes_only_the_purged_sessions,
            log_compaction_restates_the_log_once,
            log_compaction_is_fenced_and_bounded,
            inbox_purge_removes_only_the_purged_parents,
            inbox_dedup_by_message_id,
            inbox_in_order_delivery,
            inbox_unacked_redelivery,
            inbox_in_progress_defers_redelivery,
            inbox_nak_redelivers_at_once,
            inbox_consumer_survives_reopen,
            lifecycle_publish_subscribe,
            output_publish_subscribe,
            control_call_reaches_its_node,
            control_any_is_served_once,
            control_left_group_still_serves_its_own_calls,
            control_unserved_is_unavailable,
            control_progress_reaches_watchers,
            workspace_round_trip,
            workspace_purge_removes_only_the_purged_sessions,
        );
    };
    (@cases $make:expr; $($case:ident,)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let backend = $make.await;
                $crate::conformance::$case(&backend).await;
            }
        )+
    };
}
