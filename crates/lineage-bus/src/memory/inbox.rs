//! The parent inbox in memory ([`MemoryInbox`]): the twin of [`crate::inbox::ParentInbox`].
//!
//! One stream for all parents, deduplicated by `Nats-Msg-Id` for
//! [`crate::inbox::DUPLICATE_WINDOW`]; one durable consumer per parent with explicit acks: new
//! messages in publish order, and a delivered message not acked within the ack wait is
//! delivered again (before new ones, as JetStream does).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use lineage_core::ids::SessionId;
use lineage_core::messages::InboxMessage;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{expire, lock};
use crate::error::BusError;
use crate::inbox::{InboxDelivery, Published, DUPLICATE_WINDOW};
use crate::ports::{Acknowledge, BoxFuture, Inbox, InboxReader};

/// The inbox stream and its consumers, shared by every handle of one bus.
pub(super) struct InboxShared {
    state: Mutex<InboxState>,
    /// Woken on every publish and consumer deletion.
    notify: Notify,
    ack_wait: Duration,
}

impl InboxShared {
    /// No messages, no consumers; an unacknowledged message is delivered again after
    /// `ack_wait`.
    pub(super) fn new(ack_wait: Duration) -> Self {
        InboxShared {
            state: Mutex::new(InboxState::default()),
            notify: Notify::new(),
            ack_wait,
        }
    }
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
    pub(super) shared: Arc<InboxShared>,
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
