//! In-memory twins of the bus ports: the same semantics as JetStream and core NATS, in one
//! process, for host-logic tests that need no nats-server. Not mocks: they pass the same
//! [`crate::conformance`] suite as the NATS implementations.
//!
//! A [`MemoryBus`] is one "server": every handle made from it (or from a clone of it) sees the
//! same session logs, inboxes and lifecycle feed, so a host restarted on the same bus finds its
//! durable consumers and unacknowledged messages again.
//!
//! - [`MemoryEventLog`]: one stream sequence for all sessions (a cursor is a stream sequence, as
//!   on JetStream); an append is one stored unit (the same bytes the NATS store writes), fenced
//!   by the expected-last cursor and deduplicated by message id for [`EVENTS_DUPLICATE_WINDOW`].
//! - [`MemoryInbox`]: one stream for all parents, deduplicated by `Nats-Msg-Id` for
//!   [`crate::inbox::DUPLICATE_WINDOW`]; one durable consumer per parent with explicit acks:
//!   new messages in publish order, and a delivered message not acked within the ack wait is
//!   delivered again (before new ones, as JetStream does).
//! - [`MemoryLifecycle`]: a broadcast channel; a watch sees what is published after it opened.
//! - [`MemoryControl`] ([`control`]): node-to-node control calls through one hub; a call
//!   nobody serves, or nobody answers in time, is `unavailable`.

pub mod control;
pub mod output;

pub use control::MemoryControl;
pub use output::MemoryTurnOutputs;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use lineage_core::ids::SessionId;
use lineage_core::log::SessionEvent;
use lineage_core::messages::{InboxMessage, LifecycleEvent};
use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;

use crate::error::BusError;
use crate::events::{decode_log_message, encode_append, EncodedAppend, LogCursor};
use crate::inbox::{InboxDelivery, Published, ACK_WAIT, DUPLICATE_WINDOW};
use crate::ports::{
    Acknowledge, BoxFuture, EventLog, Inbox, InboxReader, Lifecycle, LifecycleFeed,
};

/// How long the events twin remembers append ids (JetStream's default duplicate window, which
/// the events stream keeps).
pub const EVENTS_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Lifecycle events a slow watch may fall behind by before it is told it lost some.
pub const LIFECYCLE_BUFFER: usize = 4096;

/// One in-memory bus: the shared state behind every twin handle made from it.
#[derive(Clone)]
pub struct MemoryBus {
    log: Arc<Mutex<LogState>>,
    inbox: Arc<InboxShared>,
    lifecycle: broadcast::Sender<LifecycleEvent>,
    control: MemoryControl,
    output: MemoryTurnOutputs,
}

impl Default for MemoryBus {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBus").finish_non_exhaustive()
    }
}

impl MemoryBus {
    /// An empty bus whose inbox consumers redeliver after [`ACK_WAIT`].
    pub fn new() -> Self {
        Self::with_ack_wait(ACK_WAIT)
    }

    /// An empty bus whose inbox consumers redeliver an unacknowledged message after `ack_wait`.
    pub fn with_ack_wait(ack_wait: Duration) -> Self {
        let (lifecycle, _) = broadcast::channel(LIFECYCLE_BUFFER);
        MemoryBus {
            log: Arc::new(Mutex::new(LogState::default())),
            inbox: Arc::new(InboxShared {
                state: Mutex::new(InboxState::default()),
                notify: Notify::new(),
                ack_wait,
            }),
            lifecycle,
            control: MemoryControl::new(),
            output: MemoryTurnOutputs::new(),
        }
    }

    /// A handle on this bus's session logs.
    pub fn events(&self) -> MemoryEventLog {
        MemoryEventLog {
            state: self.log.clone(),
        }
    }

    /// A handle on this bus's parent inboxes.
    pub fn inbox(&self) -> MemoryInbox {
        MemoryInbox {
            shared: self.inbox.clone(),
        }
    }

    /// A handle on this bus's turn output.
    pub fn output(&self) -> MemoryTurnOutputs {
        self.output.clone()
    }

    /// A handle on this bus's lifecycle events.
    pub fn lifecycle(&self) -> MemoryLifecycle {
        MemoryLifecycle {
            tx: self.lifecycle.clone(),
        }
    }

    /// A handle on this bus's control transport (every handle reaches the same nodes).
    pub fn control(&self) -> MemoryControl {
        self.control.clone()
    }
}

/// Locks a twin's state; a poisoned lock (a panic while it was held) is an internal error.
fn lock<'a, T>(m: &'a Mutex<T>, what: &'static str) -> Result<MutexGuard<'a, T>, BusError> {
    m.lock().map_err(|_| BusError::JetStream {
        op: what,
        reason: "the in-memory bus state is poisoned (a panic while it was held)".to_owned(),
    })
}

/// Forgets ids older than `window`.
fn expire(dedup: &mut HashMap<String, (u64, Instant)>, window: Duration, now: Instant) {
    dedup.retain(|_, (_, at)| now.saturating_duration_since(*at) < window);
}

// ---- session event log ------------------------------------------------------------------

#[derive(Default)]
struct LogState {
    last_seq: u64,
    sessions: HashMap<SessionId, Vec<StoredAppend>>,
    dedup: HashMap<String, (u64, Instant)>,
}

struct StoredAppend {
    seq: u64,
    msg_id: String,
    payload: Bytes,
}

/// The session event log in memory: the twin of [`crate::events::EventLogStore`].
#[derive(Clone)]
pub struct MemoryEventLog {
    state: Arc<Mutex<LogState>>,
}

impl MemoryEventLog {
    fn append_now(
        &self,
        session: &SessionId,
        append: EncodedAppend,
        expected: Option<LogCursor>,
    ) -> Result<LogCursor, BusError> {
        let mut state = lock(&self.state, "append to a session log")?;
        let state = &mut *state;
        let now = Instant::now();
        let log = state.sessions.entry(session.clone()).or_default();
        let last = log.last();
        if let Some(cursor) = expected {
            if last.map(|l| l.seq).unwrap_or(0) != cursor.last_stream_seq {
                // The log moved: it is still ours when its last unit is this append (a retry
                // whose ack was lost), as `EventLogStore::landed` recognises it.
                return match last {
                    Some(l) if l.msg_id == append.msg_id && l.payload == append.payload => {
                        Ok(LogCursor {
                            last_stream_seq: l.seq,
                        })
                    }
                    Some(_) | None => Err(BusError::LogConflict {
                        session: session.to_string(),
                        expected: cursor.last_stream_seq,
                    }),
                };
            }
        }
        expire(&mut state.dedup, EVENTS_DUPLICATE_WINDOW, now);
        if let Some((seq, _)) = state.dedup.get(&append.msg_id) {
            return Ok(LogCursor {
                last_stream_seq: *seq,
            });
        }
        state.last_seq += 1;
        let seq = state.last_seq;
        state.dedup.insert(append.msg_id.clone(), (seq, now));
        log.push(StoredAppend {
            seq,
            msg_id: append.msg_id,
            payload: append.payload,
        });
        Ok(LogCursor {
            last_stream_seq: seq,
        })
    }

    fn read_now(&self, session: &SessionId) -> Result<(Vec<SessionEvent>, LogCursor), BusError> {
        let state = lock(&self.state, "read a session log")?;
        let mut events = Vec::new();
        let mut cursor = LogCursor::default();
        for stored in state.sessions.get(session).into_iter().flatten() {
            events.extend(decode_log_message(&stored.payload)?);
            cursor.last_stream_seq = stored.seq;
        }
        Ok((events, cursor))
    }
}

impl EventLog for MemoryEventLog {
    fn append_all<'a>(
        &'a self,
        session: &'a SessionId,
        events: &'a [SessionEvent],
        expected: Option<LogCursor>,
    ) -> BoxFuture<'a, Result<LogCursor, BusError>> {
        Box::pin(async move {
            match encode_append(session, events)? {
                Some(append) => self.append_now(session, append, expected),
                None => Ok(expected.unwrap_or_default()),
            }
        })
    }

    fn read<'a>(
        &'a self,
        session: &'a SessionId,
    ) -> BoxFuture<'a, Result<(Vec<SessionEvent>, LogCursor), BusError>> {
        Box::pin(async move { self.read_now(session) })
    }

    fn purge<'a>(&'a self, sessions: &'a [SessionId]) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            let mut state = lock(&self.state, "purge session logs")?;
            for session in sessions {
                state.sessions.remove(session);
            }
            Ok(())
        })
    }
}

// ---- parent inbox -----------------------------------------------------------------------

struct InboxShared {
    state: Mutex<InboxState>,
    /// Woken on every publish and consumer deletion.
    notify: Notify,
    ack_wait: Duration,
}

#[derive(Default)]
struct InboxState {
    last_seq: u64,
    messages: Vec<StoredMessage>,
    dedup: HashMap<String, (u64, Instant)>,
    consumers: HashMap<SessionId, ConsumerState>,
    generations: u64,
}

struct StoredMessage {
    seq: u64,
    parent: SessionId,
    payload: Bytes,
    traceparent: Option<String>,
}

/// A durable consumer: what it delivered first-time, and what is delivered but unacked.
struct ConsumerState {
    generation: u64,
    delivered_upto: u64,
    /// Stream sequence -> when it is delivered again unless acked.
    pending: BTreeMap<u64, Instant>,
}

/// The parent inbox in memory: the twin of [`crate::inbox::ParentInbox`].
#[derive(Clone)]
pub struct MemoryInbox {
    shared: Arc<InboxShared>,
}

impl MemoryInbox {
    fn publish_now(
        &self,
        message: &InboxMessage,
        traceparent: Option<&str>,
    ) -> Result<Published, BusError> {
        let mut state = lock(&self.shared.state, "publish to a parent inbox")?;
        let now = Instant::now();
        expire(&mut state.dedup, DUPLICATE_WINDOW, now);
        let id = message.dedup_id();
        if let Some((seq, _)) = state.dedup.get(&id) {
            return Ok(Published {
                sequence: *seq,
                duplicate: true,
            });
        }
        state.last_seq += 1;
        let seq = state.last_seq;
        state.dedup.insert(id, (seq, now));
        state.messages.push(StoredMessage {
            seq,
            parent: message.parent_session_id().clone(),
            payload: Bytes::from(message.encode()),
            traceparent: traceparent.map(str::to_owned),
        });
        drop(state);
        self.shared.notify.notify_waiters();
        Ok(Published {
            sequence: seq,
            duplicate: false,
        })
    }

    fn open_now(&self, parent: &SessionId) -> Result<MemoryInboxReader, BusError> {
        let mut state = lock(&self.shared.state, "open a parent inbox consumer")?;
        let state = &mut *state;
        let generation = match state.consumers.get(parent) {
            Some(c) => c.generation,
            None => {
                state.generations += 1;
                state.consumers.insert(
                    parent.clone(),
                    ConsumerState {
                        generation: state.generations,
                        delivered_upto: 0,
                        pending: BTreeMap::new(),
                    },
                );
                state.generations
            }
        };
        Ok(MemoryInboxReader {
            shared: self.shared.clone(),
            parent: parent.clone(),
            generation,
        })
    }

    fn delete_now(&self, parents: &[SessionId]) -> Result<usize, BusError> {
        let mut state = lock(&self.shared.state, "delete parent inbox consumers")?;
        let deleted = parents
            .iter()
            .filter(|p| state.consumers.remove(*p).is_some())
            .count();
        drop(state);
        self.shared.notify.notify_waiters();
        Ok(deleted)
    }
}

impl Inbox for MemoryInbox {
    fn publish<'a>(
        &'a self,
        message: &'a InboxMessage,
        traceparent: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Published, BusError>> {
        Box::pin(async move { self.publish_now(message, traceparent) })
    }

    fn consumer<'a>(
        &'a self,
        parent: &'a SessionId,
    ) -> BoxFuture<'a, Result<Box<dyn InboxReader>, BusError>> {
        Box::pin(async move {
            let reader = self.open_now(parent)?;
            Ok(Box::new(reader) as Box<dyn InboxReader>)
        })
    }

    fn delete_consumer<'a>(&'a self, parent: &'a SessionId) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move { self.delete_now(std::slice::from_ref(parent)).map(|_| ()) })
    }

    fn delete_consumers<'a>(
        &'a self,
        parents: &'a [SessionId],
    ) -> BoxFuture<'a, Result<usize, BusError>> {
        Box::pin(async move { self.delete_now(parents) })
    }

    fn purge<'a>(&'a self, parents: &'a [SessionId]) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            self.delete_now(parents)?;
            let gone: std::collections::HashSet<&SessionId> = parents.iter().collect();
            let mut state = lock(&self.shared.state, "purge parent inboxes")?;
            state.messages.retain(|m| !gone.contains(&m.parent));
            Ok(())
        })
    }
}

/// What a reader found when it looked at its consumer.
enum Next {
    /// Deliver this.
    Deliver(InboxDelivery),
    /// Nothing now: wait for a publish, or until this deadline (an unacked message's).
    Wait(Option<Instant>),
    /// The consumer was deleted.
    Gone,
}

/// One reader of a durable consumer in memory.
struct MemoryInboxReader {
    shared: Arc<InboxShared>,
    parent: SessionId,
    generation: u64,
}

impl MemoryInboxReader {
    fn look(&self) -> Result<Next, BusError> {
        let mut state = lock(&self.shared.state, "receive from a parent inbox")?;
        let state = &mut *state;
        let now = Instant::now();
        let ack_wait = self.shared.ack_wait;
        let Some(consumer) = state
            .consumers
            .get_mut(&self.parent)
            .filter(|c| c.generation == self.generation)
        else {
            return Ok(Next::Gone);
        };
        // Redeliveries first (the oldest unacked message whose ack wait ran out), then new.
        let due = consumer
            .pending
            .iter()
            .find(|(_, deadline)| **deadline <= now)
            .map(|(seq, _)| *seq);
        let seq = match due {
            Some(seq) => Some(seq),
            None => state
                .messages
                .iter()
                .find(|m| m.seq > consumer.delivered_upto && m.parent == self.parent)
                .map(|m| m.seq),
        };
        let Some(seq) = seq else {
            return Ok(Next::Wait(consumer.pending.values().min().copied()));
        };
        consumer.delivered_upto = consumer.delivered_upto.max(seq);
        consumer.pending.insert(seq, now + ack_wait);
        let stored = state
            .messages
            .iter()
            .find(|m| m.seq == seq)
            .ok_or_else(|| BusError::JetStream {
                op: "receive from a parent inbox",
                reason: format!("message {seq} is pending but not stored"),
            })?;
        let message = InboxMessage::decode(&stored.payload).map_err(BusError::from);
        Ok(Next::Deliver(InboxDelivery::new(
            message,
            stored.traceparent.clone(),
            Box::new(MemoryAck {
                shared: self.shared.clone(),
                parent: self.parent.clone(),
                generation: self.generation,
                seq,
            }),
        )))
    }
}

impl InboxReader for MemoryInboxReader {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<InboxDelivery, BusError>>> {
        Box::pin(async move {
            loop {
                // Registered before looking, so a publish between the look and the wait wakes it.
                let notified = self.shared.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let deadline = match self.look() {
                    Ok(Next::Deliver(d)) => return Some(Ok(d)),
                    Ok(Next::Gone) => return None,
                    Err(e) => return Some(Err(e)),
                    Ok(Next::Wait(deadline)) => deadline,
                };
                match deadline {
                    Some(at) => {
                        tokio::select! {
                            _ = notified => {}
                            _ = tokio::time::sleep_until(at) => {}
                        }
                    }
                    None => notified.await,
                }
            }
        })
    }
}

/// Acks of one delivered message of one consumer generation.
struct MemoryAck {
    shared: Arc<InboxShared>,
    parent: SessionId,
    generation: u64,
    seq: u64,
}

impl MemoryAck {
    /// Applies `change` to the message's pending entry, if its consumer still exists.
    fn with_pending(
        &self,
        op: &'static str,
        change: impl FnOnce(&mut BTreeMap<u64, Instant>, u64),
    ) -> Result<(), BusError> {
        let mut state = lock(&self.shared.state, op)?;
        if let Some(consumer) = state
            .consumers
            .get_mut(&self.parent)
            .filter(|c| c.generation == self.generation)
        {
            change(&mut consumer.pending, self.seq);
        }
        Ok(())
    }
}

impl Acknowledge for MemoryAck {
    fn ack(&self) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            self.with_pending("acknowledge an inbox message", |pending, seq| {
                pending.remove(&seq);
            })
        })
    }

    fn in_progress(&self) -> BoxFuture<'_, Result<(), BusError>> {
        let again = Instant::now() + self.shared.ack_wait;
        Box::pin(async move {
            self.with_pending("mark an inbox message in progress", |pending, seq| {
                if let Some(deadline) = pending.get_mut(&seq) {
                    *deadline = again;
                }
            })
        })
    }

    fn nak(&self) -> BoxFuture<'_, Result<(), BusError>> {
        let due = Instant::now() + crate::inbox::NAK_DELAY;
        Box::pin(async move {
            self.with_pending("give an inbox message back", |pending, seq| {
                if let Some(deadline) = pending.get_mut(&seq) {
                    *deadline = due;
                }
            })?;
            self.shared.notify.notify_waiters();
            Ok(())
        })
    }
}

// ---- lifecycle events -------------------------------------------------------------------

/// Lifecycle events in memory: the twin of [`crate::lifecycle::NatsLifecycle`].
#[derive(Clone)]
pub struct MemoryLifecycle {
    tx: broadcast::Sender<LifecycleEvent>,
}

impl Lifecycle for MemoryLifecycle {
    fn publish<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Result<(), BusError>> {
        // Nobody listening is not an error: core NATS drops such a message too.
        let _ = self.tx.send(event.clone());
        Box::pin(async { Ok(()) })
    }

    fn watch<'a>(
        &'a self,
        parent: &'a SessionId,
    ) -> BoxFuture<'a, Result<Box<dyn LifecycleFeed>, BusError>> {
        let feed = MemoryLifecycleFeed {
            rx: self.tx.subscribe(),
            parent: parent.clone(),
        };
        Box::pin(async move { Ok(Box::new(feed) as Box<dyn LifecycleFeed>) })
    }
}

struct MemoryLifecycleFeed {
    rx: broadcast::Receiver<LifecycleEvent>,
    parent: SessionId,
}

impl LifecycleFeed for MemoryLifecycleFeed {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<LifecycleEvent, BusError>>> {
        Box::pin(async move {
            loop {
                match self.rx.recv().await {
                    Ok(event) if event.parent_session_id() == &self.parent => {
                        return Some(Ok(event))
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(lost)) => {
                        return Some(Err(BusError::Nats {
                            op: "receive lifecycle events",
                            reason: format!("the watch fell behind and lost {lost} events"),
                        }))
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }
}
