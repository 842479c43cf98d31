//! The bus as narrow, object-safe ports (issue 10): what the host needs from the session event
//! log, the parent inbox and the lifecycle events, and nothing more.
//!
//! Each port has two implementations that pass the same `conformance` suite (feature `twins`):
//!
//! | port | NATS (JetStream / core NATS) | in memory (`memory`, feature `twins`) |
//! |---|---|---|
//! | [`EventLog`] | [`crate::events::EventLogStore`] | `memory::MemoryEventLog` |
//! | [`Inbox`] | [`crate::inbox::ParentInbox`] | `memory::MemoryInbox` |
//! | [`Lifecycle`] | [`crate::lifecycle::NatsLifecycle`] | `memory::MemoryLifecycle` |
//! | [`ControlTransport`] | [`crate::transport::NatsControl`] (the NATS micro service) | `memory::MemoryControl` |
//!
//! Async methods return [`BoxFuture`] (the same shape as the host's), so the host keeps
//! `Arc<dyn EventLog>` and friends and never names a NATS type.

use std::future::Future;
use std::pin::Pin;

use lineage_core::ids::{DrainId, NodeId, SessionId};
use lineage_core::log::SessionEvent;
use lineage_core::messages::{InboxMessage, LifecycleEvent};

use crate::control::{ControlError, Hop};
use crate::error::BusError;
use crate::events::{LogCursor, LogRead};
use crate::inbox::{InboxDelivery, Published};
use crate::trace::TraceContext;

/// A boxed, sendable future: what every port method returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The session event log (L3, P1, K1): one append-only log per session, fenced by an
/// expected-last cursor.
///
/// Contract (checked by the `conformance` suite, feature `twins`):
/// - [`EventLog::append_all`] stores its events as one unit: all of them or none; it returns the
///   cursor to append after them.
/// - With `expected`, an append is refused with [`BusError::LogConflict`] when the log moved
///   past that cursor, unless the log's last unit *is* this append (same events, same first and
///   last seq: a retry whose first ack was lost), which returns that unit's cursor.
/// - A retry without `expected` of an append that landed is recognised by its id
///   (`<session>-<first>[-<last>]`) and not stored twice.
/// - [`EventLog::read`] returns every event of the session, in order, with the cursor after
///   them; other sessions' events never mix in. Appending nothing returns `expected` untouched.
/// - [`EventLog::compact`] writes the whole log as one unit after `expected` (fenced like an
///   append) or, when that unit would be larger than [`crate::events::COMPACTION_MAX_BYTES`],
///   writes nothing and says so. Until [`EventLog::drop_superseded`] removes the units before
///   it, a read meets each event twice and returns it once; after, the log is that one unit.
///   Either way a read returns the same events and the compaction's cursor.
pub trait EventLog: Send + Sync + 'static {
    /// Appends `events` (in order) as one unit; see the trait docs.
    fn append_all<'a>(
        &'a self,
        session: &'a SessionId,
        events: &'a [SessionEvent],
        expected: Option<LogCursor>,
    ) -> BoxFuture<'a, Result<LogCursor, BusError>>;

    /// Reads a session's whole log, in order, with the cursor to append after it and how many
    /// units hold it.
    fn read_log<'a>(&'a self, session: &'a SessionId) -> BoxFuture<'a, Result<LogRead, BusError>>;

    /// Reads a session's whole log, in order, with the cursor to append after it.
    fn read<'a>(
        &'a self,
        session: &'a SessionId,
    ) -> BoxFuture<'a, Result<(Vec<SessionEvent>, LogCursor), BusError>> {
        Box::pin(async move {
            let read = self.read_log(session).await?;
            Ok((read.events, read.cursor))
        })
    }

    /// Compaction: writes `events` (the whole log, from seq 1) as one unit after `expected`
    /// (refused with [`BusError::LogConflict`] when the log moved past it). `Ok(None)`: too
    /// large for one unit, nothing written. See the trait docs.
    fn compact<'a>(
        &'a self,
        session: &'a SessionId,
        events: &'a [SessionEvent],
        expected: LogCursor,
    ) -> BoxFuture<'a, Result<Option<LogCursor>, BusError>>;

    /// Removes the units of `session`'s log before `compaction` (a cursor
    /// [`EventLog::compact`] returned), which restates them. Safe whatever was appended since;
    /// doing it again is harmless.
    fn drop_superseded<'a>(
        &'a self,
        session: &'a SessionId,
        compaction: LogCursor,
    ) -> BoxFuture<'a, Result<(), BusError>>;

    /// Appends one event ([`EventLog::append_all`] of one).
    fn append<'a>(
        &'a self,
        session: &'a SessionId,
        event: &'a SessionEvent,
        expected: Option<LogCursor>,
    ) -> BoxFuture<'a, Result<LogCursor, BusError>> {
        self.append_all(session, std::slice::from_ref(event), expected)
    }

    /// Q5: removes every event of `sessions` (purged: disposed past their retention), so a
    /// read returns none. A session with no events is not an error; purging again is harmless.
    fn purge<'a>(&'a self, sessions: &'a [SessionId]) -> BoxFuture<'a, Result<(), BusError>>;
}

/// The parent inbox (M1, M2, N2): reports and settlement notices a parent must not lose.
///
/// Contract (checked by the `conformance` suite, feature `twins`):
/// - A publish is deduplicated by [`InboxMessage::dedup_id`] within
///   [`crate::inbox::DUPLICATE_WINDOW`]: a second copy reports `duplicate` and is not delivered.
/// - Each parent has one durable consumer ([`Inbox::consumer`] opens it or re-opens it, from any
///   handle on the same store): messages come in publish order, stay until acked, and one
///   delivered but not acked within the ack wait is delivered again (at least once).
///   [`InboxDelivery::in_progress`] restarts its ack wait.
/// - [`Inbox::delete_consumer`] forgets the consumer (a new one starts from the first message);
///   deleting one that does not exist is not an error.
pub trait Inbox: Send + Sync + 'static {
    /// Publishes a report or settlement notice to its parent's inbox, with `traceparent` (a W3C
    /// value) carried to the delivery.
    fn publish<'a>(
        &'a self,
        message: &'a InboxMessage,
        traceparent: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Published, BusError>>;

    /// Opens (or re-opens) the durable consumer of one parent's inbox.
    fn consumer<'a>(
        &'a self,
        parent: &'a SessionId,
    ) -> BoxFuture<'a, Result<Box<dyn InboxReader>, BusError>>;

    /// Deletes a parent's durable consumer once the parent is disposed.
    fn delete_consumer<'a>(&'a self, parent: &'a SessionId) -> BoxFuture<'a, Result<(), BusError>>;

    /// Deletes the durable consumers of many parents; returns how many existed and were
    /// deleted. The first failure is returned after every deletion was tried.
    fn delete_consumers<'a>(
        &'a self,
        parents: &'a [SessionId],
    ) -> BoxFuture<'a, Result<usize, BusError>>;

    /// Q5: removes every message addressed to `parents` (purged sessions) and their durable
    /// consumers. A parent with none is not an error; purging again is harmless.
    fn purge<'a>(&'a self, parents: &'a [SessionId]) -> BoxFuture<'a, Result<(), BusError>>;
}

/// One parent's durable inbox consumer, read in order.
pub trait InboxReader: Send {
    /// Waits for the next delivery; `None` when the consumer is gone.
    fn next(&mut self) -> BoxFuture<'_, Option<Result<InboxDelivery, BusError>>>;
}

/// How a delivery is acknowledged: the implementation's side of [`InboxDelivery`].
pub trait Acknowledge: Send + Sync {
    /// The message is done: never deliver it again.
    fn ack(&self) -> BoxFuture<'_, Result<(), BusError>>;
    /// The message is still being worked on: restart its ack wait.
    fn in_progress(&self) -> BoxFuture<'_, Result<(), BusError>>;
    /// This reader will not take the message: deliver it again after
    /// [`crate::inbox::NAK_DELAY`] (to any reader of the consumer), not after its ack wait.
    fn nak(&self) -> BoxFuture<'_, Result<(), BusError>>;
}

/// `subagent/start` and `subagent/end` (E1, E2): at most once, to whoever listens on the
/// parent when the event is published.
///
/// Contract (checked by the `conformance` suite, feature `twins`): a watch on a parent sees its direct children's
/// events published after the watch opened, in publish order, and nothing of other parents.
pub trait Lifecycle: Send + Sync + 'static {
    /// Publishes an event on its parent's start or end subject, with the current trace context
    /// ([`crate::trace::current`]) when there is one.
    fn publish<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Result<(), BusError>>;

    /// A live feed of `parent`'s children's lifecycle events.
    fn watch<'a>(
        &'a self,
        parent: &'a SessionId,
    ) -> BoxFuture<'a, Result<Box<dyn LifecycleFeed>, BusError>>;
}

/// A live feed of one parent's lifecycle events.
pub trait LifecycleFeed: Send {
    /// The next event; `None` when the feed closed.
    fn next(&mut self) -> BoxFuture<'_, Option<Result<LifecycleEvent, BusError>>>;
}

/// A turn's output as it comes (F1): `turn-start`, `chunk`s, `turn-end` of each session's
/// turns, at most once, to whoever watches when it is published.
///
/// Contract (checked by the `conformance` suite, feature `twins`): a watch on a session sees that session's
/// output published after the watch opened, in publish order, and nothing of other sessions; a
/// watch on every session (`None`) sees all of it.
pub trait TurnOutputs: Send + Sync + 'static {
    /// Publishes one output message on its session's subject.
    fn publish<'a>(
        &'a self,
        output: &'a lineage_core::output::TurnOutput,
    ) -> BoxFuture<'a, Result<(), BusError>>;

    /// A live feed of `session`'s output, or of every session's when `None`.
    fn watch<'a>(
        &'a self,
        session: Option<&'a SessionId>,
    ) -> BoxFuture<'a, Result<Box<dyn TurnOutputFeed>, BusError>>;
}

/// A live feed of turn output.
pub trait TurnOutputFeed: Send {
    /// The next message; `None` when the feed closed.
    fn next(&mut self)
        -> BoxFuture<'_, Option<Result<lineage_core::output::TurnOutput, BusError>>>;
}

/// Where a control call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlTarget {
    /// Any one node of the cluster (`lineage.<cluster>.ctl.<op>`, a queue group).
    Any,
    /// That node (`lineage.<cluster>.node.<node>.<op>`).
    Node(NodeId),
}

/// One control call as it travels: an op of the control service, its JSON body, whether a
/// node forwarded it, and the caller's trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlCall {
    /// The op (`lineage_protocol::control::ops`).
    pub op: String,
    /// The request body (JSON).
    pub body: Vec<u8>,
    /// How it reached the serving node (the `Lineage-Forwarded` header).
    pub hop: Hop,
    /// The caller's trace context (the `traceparent` header).
    pub trace: Option<TraceContext>,
}

/// Answers one received [`ControlCall`] (once).
pub type Responder = Box<dyn FnOnce(Vec<u8>) -> BoxFuture<'static, Result<(), BusError>> + Send>;

/// A control call a serving node received, and the way to answer it.
pub struct IncomingCall {
    /// The call.
    pub call: ControlCall,
    /// Sends the reply body (an envelope) to the caller.
    pub respond: Responder,
}

impl std::fmt::Debug for IncomingCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingCall")
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

/// The control transport (N3, R2): node-to-node requests (forwarding, placement, drain
/// fan-out), the serving side of one node, and drain progress messages.
///
/// Contract (checked by the `conformance` suite, feature `twins`):
/// - A call to [`ControlTarget::Node`] reaches that node's endpoints, with its op, body, hop
///   and trace unchanged, and returns the bytes the node answered.
/// - A call to [`ControlTarget::Any`] is served by exactly one serving node.
/// - A call nobody serves (no node, or its endpoints were stopped), or that gets no answer
///   within `timeout`, is `unavailable`, in about `timeout` at most.
/// - Drain progress reaches the watches opened before it was published (core NATS: no
///   watcher, no message).
pub trait ControlTransport: Send + Sync {
    /// Sends `call` to `target` and waits up to `timeout` for the reply body.
    fn request<'a>(
        &'a self,
        target: &'a ControlTarget,
        call: ControlCall,
        timeout: std::time::Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, ControlError>>;

    /// Starts serving `node`'s endpoints: every cluster-wide op (shared with the other nodes)
    /// and every per-node op (its own). Once this returns, calls reach the endpoints.
    fn serve<'a>(
        &'a self,
        node: &'a NodeId,
    ) -> BoxFuture<'a, Result<Box<dyn ControlEndpoints>, BusError>>;

    /// Publishes one drain progress message to whoever watches `drain`.
    fn progress<'a>(
        &'a self,
        drain: &'a DrainId,
        body: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), BusError>>;

    /// A live feed of `drain`'s progress messages.
    fn watch_progress<'a>(
        &'a self,
        drain: &'a DrainId,
    ) -> BoxFuture<'a, Result<Box<dyn ProgressFeed>, BusError>>;
}

/// The served endpoints of one node.
pub trait ControlEndpoints: Send {
    /// The next received call; `None` once the endpoints are stopped.
    fn next(&mut self) -> BoxFuture<'_, Option<IncomingCall>>;

    /// Stops serving (unregisters the endpoints); later calls to this node are `unavailable`.
    fn stop(self: Box<Self>) -> BoxFuture<'static, ()>;

    /// Leaves the cluster-wide queue group (a node winding down, K1): calls to any node go to
    /// the others from now on, while calls to this node's own subjects are still received
    /// (until [`ControlEndpoints::stop`]).
    fn leave_group(&mut self) -> BoxFuture<'_, ()>;
}

/// A live feed of one drain's progress messages.
pub trait ProgressFeed: Send {
    /// The next message; `None` when the feed closed.
    fn next(&mut self) -> BoxFuture<'_, Option<Vec<u8>>>;
}

/// A stored workspace snapshot: its bytes and the digest the store recorded for them
/// (`SHA-256=<base64url>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWorkspace {
    /// The snapshot.
    pub bytes: Vec<u8>,
    /// Its digest as recorded.
    pub digest: String,
}

/// Workspace snapshots (issue 39): named objects in the cluster's Object Store bucket
/// ([`crate::Subjects::workspace_bucket`]); the names are
/// [`lineage_core::workspace`]'s (a session's base and checkpoints, a client's upload).
pub trait WorkspaceStore: Send + Sync + 'static {
    /// Stores `bytes` as `object` (replacing any earlier one); returns its digest as the store
    /// recorded it (`SHA-256=<base64url>`).
    fn put<'a>(
        &'a self,
        object: &'a str,
        bytes: &'a [u8],
    ) -> BoxFuture<'a, Result<String, BusError>>;
    /// `object`'s bytes and recorded digest; `None` when there is no such object.
    fn get<'a>(
        &'a self,
        object: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredWorkspace>, BusError>>;
    /// Deletes `objects`; absent ones are skipped.
    fn delete<'a>(&'a self, objects: &'a [String]) -> BoxFuture<'a, Result<(), BusError>>;
}

/// Deletes every object of `sessions` (retention, Q5).
pub async fn purge_workspaces(
    store: &dyn WorkspaceStore,
    sessions: &[SessionId],
) -> Result<(), BusError> {
    let objects: Vec<String> = sessions
        .iter()
        .flat_map(lineage_core::workspace::session_objects)
        .collect();
    store.delete(&objects).await
}

/// The bus ports a host uses, as shared trait objects.
#[derive(Clone)]
pub struct BusPorts {
    /// The session event log.
    pub events: std::sync::Arc<dyn EventLog>,
    /// The parent inbox.
    pub inbox: std::sync::Arc<dyn Inbox>,
    /// Lifecycle events.
    pub lifecycle: std::sync::Arc<dyn Lifecycle>,
    /// The control transport.
    pub control: std::sync::Arc<dyn ControlTransport>,
    /// Turn output as it comes.
    pub output: std::sync::Arc<dyn TurnOutputs>,
    /// Workspace snapshots (issue 39).
    pub workspaces: std::sync::Arc<dyn WorkspaceStore>,
}

impl std::fmt::Debug for BusPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusPorts").finish_non_exhaustive()
    }
}

impl BusPorts {
    /// The NATS ports: opens (creating or reconciling, see [`crate::streams`]) the events and
    /// inbox streams of `subjects`' cluster on `client`.
    pub async fn nats(
        client: async_nats::Client,
        subjects: crate::Subjects,
        options: crate::StreamOptions,
    ) -> Result<Self, BusError> {
        let inbox =
            crate::inbox::ParentInbox::open_with(client.clone(), subjects.clone(), options).await?;
        let events =
            crate::events::EventLogStore::open_with(client.clone(), subjects.clone(), options)
                .await?;
        Ok(BusPorts {
            events: std::sync::Arc::new(events),
            inbox: std::sync::Arc::new(inbox),
            lifecycle: std::sync::Arc::new(crate::lifecycle::NatsLifecycle::new(
                client.clone(),
                subjects.clone(),
            )),
            output: std::sync::Arc::new(crate::output::NatsTurnOutputs::new(
                client.clone(),
                subjects.clone(),
            )),
            workspaces: std::sync::Arc::new(
                crate::workspace::NatsWorkspaces::open_with(client.clone(), &subjects, options)
                    .await,
            ),
            control: std::sync::Arc::new(crate::transport::NatsControl::new(client, subjects)),
        })
    }

    /// The in-memory twins of one `memory::MemoryBus` (every handle made from it sees
    /// the same logs, inboxes and lifecycle feed). Feature `twins`.
    #[cfg(feature = "twins")]
    pub fn memory(bus: &crate::memory::MemoryBus) -> Self {
        BusPorts {
            events: std::sync::Arc::new(bus.events()),
            inbox: std::sync::Arc::new(bus.inbox()),
            lifecycle: std::sync::Arc::new(bus.lifecycle()),
            control: std::sync::Arc::new(bus.control()),
            output: std::sync::Arc::new(bus.output()),
            workspaces: std::sync::Arc::new(bus.workspaces()),
        }
    }
}
