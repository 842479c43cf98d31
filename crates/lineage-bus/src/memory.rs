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
//! - [`MemoryInbox`] (`memory/inbox.rs`): one stream for all parents, deduplicated by
//!   `Nats-Msg-Id` for [`crate::inbox::DUPLICATE_WINDOW`]; one durable consumer per parent with
//!   explicit acks: new messages in publish order, and a delivered message not acked within the
//!   ack wait is delivered again (before new ones, as JetStream does).
//! - [`MemoryLifecycle`]: a broadcast channel; a watch sees what is published after it opened.
//! - [`MemoryControl`] ([`control`]): node-to-node control calls through one hub; a call
//!   nobody serves, or nobody answers in time, is `unavailable`.

pub mod control;
mod inbox;
pub mod output;
pub mod workspace;

pub use control::MemoryControl;
pub use inbox::MemoryInbox;
pub use output::MemoryTurnOutputs;
pub use workspace::MemoryWorkspaces;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use lineage_core::ids::SessionId;
use lineage_core::log::SessionEvent;
use lineage_core::messages::LifecycleEvent;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::error::BusError;
use crate::events::compaction::encode_compaction;
use crate::events::{
    decode_log_message, encode_append, take_new_events, EncodedAppend, LogCursor, LogRead,
    COMPACTION_MAX_BYTES,
};
use crate::inbox::ACK_WAIT;
use crate::ports::{BoxFuture, EventLog, Lifecycle, LifecycleFeed};

use inbox::InboxShared;

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
    workspaces: MemoryWorkspaces,
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
            inbox: Arc::new(InboxShared::new(ack_wait)),
            lifecycle,
            control: MemoryControl::new(),
            output: MemoryTurnOutputs::new(),
            workspaces: MemoryWorkspaces::default(),
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

    /// A handle on this bus's workspace snapshots.
    pub fn workspaces(&self) -> MemoryWorkspaces {
        self.workspaces.clone()
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
                            last_event_seq: append.last_event_seq,
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
                last_event_seq: append.last_event_seq,
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
            last_event_seq: append.last_event_seq,
        })
    }

    fn read_now(&self, session: &SessionId) -> Result<LogRead, BusError> {
        let state = lock(&self.state, "read a session log")?;
        let mut read = LogRead::default();
        for stored in state.sessions.get(session).into_iter().flatten() {
            read.cursor.last_stream_seq = stored.seq;
            read.messages += 1;
            take_new_events(&mut read, decode_log_message(&stored.payload)?);
        }
        Ok(read)
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

    fn read_log<'a>(&'a self, session: &'a SessionId) -> BoxFuture<'a, Result<LogRead, BusError>> {
        Box::pin(async move { self.read_now(session) })
    }

    fn compact<'a>(
        &'a self,
        session: &'a SessionId,
        events: &'a [SessionEvent],
        expected: LogCursor,
    ) -> BoxFuture<'a, Result<Option<LogCursor>, BusError>> {
        Box::pin(async move {
            match encode_compaction(session, events, COMPACTION_MAX_BYTES)? {
                Some(append) => self.append_now(session, append, Some(expected)).map(Some),
                None => Ok(None),
            }
        })
    }

    fn drop_superseded<'a>(
        &'a self,
        session: &'a SessionId,
        compaction: LogCursor,
    ) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            let mut state = lock(&self.state, "purge a session log before its compaction")?;
            if let Some(log) = state.sessions.get_mut(session) {
                log.retain(|stored| stored.seq >= compaction.last_stream_seq);
            }
            Ok(())
        })
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
