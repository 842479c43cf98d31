//! The parent inbox (M1, M2, N2): reports and settlements a parent must not lose.
//!
//! One JetStream stream per cluster captures `lineage.<cluster>.parent.*.inbox`. A publish
//! carries `Nats-Msg-Id = <sender_session_id>-<seq>`, so a retried publish inside the stream's
//! duplicate window is dropped by the server. Each parent reads through its own durable pull
//! consumer (`inbox-<parent>`, explicit ack): a parent that is cold, restarting or moving finds
//! every unacknowledged message when it comes back. The parent acks only after it durably
//! accepted the message into its own log, and skips a message whose dedup id its log already
//! holds, so each message takes effect exactly once from the parent's point of view.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use async_nats::HeaderMap;
use futures::StreamExt;
use lineage_core::ids::SessionId;
use lineage_core::messages::InboxMessage;

use crate::error::BusError;
use crate::ports::{Acknowledge, BoxFuture, Inbox, InboxReader};
use crate::streams::{open_stream, outcome_unknown, retry_pause, StreamOptions};
use crate::subjects::Subjects;

/// How long the server remembers message ids for duplicate suppression.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);

/// The outcome of a publish into a parent inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// The stream sequence.
    pub sequence: u64,
    /// True when the server recognised the message id and dropped this copy.
    pub duplicate: bool,
}

/// Publishes to and reads from parent inboxes on JetStream: the NATS implementation of
/// [`crate::ports::Inbox`].
#[derive(Clone)]
pub struct ParentInbox {
    js: jetstream::Context,
    subjects: Subjects,
    ack_wait: Duration,
}

/// How long after a [`InboxDelivery::nak`] the message is delivered again: long enough for the
/// reader that gave it back to be gone at the server (dropping a pull stream unsubscribes from a
/// background task, and a message naked at once could go back to that reader's pending pull,
/// to wait out the whole [`ACK_WAIT`]), far shorter than the ack wait.
pub const NAK_DELAY: Duration = Duration::from_millis(200);

/// How long a delivered inbox message may stay unacknowledged before it is delivered again
/// (unless [`InboxDelivery::in_progress`] restarts the wait).
pub const ACK_WAIT: Duration = Duration::from_secs(30);

/// At most this many messages of one parent's inbox history are read.
pub const HISTORY_MAX: usize = 10_000;

/// Every message the inbox stream holds for `parent`, oldest first (at most [`HISTORY_MAX`]),
/// as published: the payloads (what a consumer already acknowledged is still there until
/// retention purges it). `lineage watch` replays a parent's reports and settlements from it,
/// one stream message get per message (`$JS.API.STREAM.MSG.GET`, `next_by_subj`): no consumer,
/// so the read-only observer may read it too.
pub async fn history(
    client: &async_nats::Client,
    subjects: &Subjects,
    parent: &SessionId,
) -> Result<Vec<Vec<u8>>, BusError> {
    use base64::Engine;
    let api = format!("$JS.API.STREAM.MSG.GET.{}", subjects.inbox_stream());
    let subject = subjects.parent_inbox(parent);
    let mut payloads = Vec::new();
    let mut next = 1u64;
    while payloads.len() < HISTORY_MAX {
        let ask = serde_json::json!({"seq": next, "next_by_subj": subject});
        let reply = client
            .request(api.clone(), ask.to_string().into())
            .await
            .map_err(|e| BusError::nats("read a parent's inbox history", e))?;
        let body: serde_json::Value = serde_json::from_slice(&reply.payload).map_err(|e| {
            BusError::nats("read a parent's inbox history", format!("not JSON: {e}"))
        })?;
        if body["error"]["code"] == 404 {
            break;
        }
        let message = &body["message"];
        let (Some(seq), Some(data)) = (message["seq"].as_u64(), message["data"].as_str()) else {
            return Err(BusError::nats(
                "read a parent's inbox history",
                format!("unexpected answer: {body}"),
            ));
        };
        let payload = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| BusError::nats("read a parent's inbox history", e))?;
        payloads.push(payload);
        next = seq + 1;
    }
    Ok(payloads)
}

impl ParentInbox {
    /// Binds to the inbox stream of a cluster with one replica ([`StreamOptions::default`]);
    /// see [`ParentInbox::open_with`].
    pub async fn open(client: async_nats::Client, subjects: Subjects) -> Result<Self, BusError> {
        Self::open_with(client, subjects, StreamOptions::default()).await
    }

    /// Binds to the inbox stream of a cluster, creating it (with `options.replicas` replicas)
    /// if it does not exist; an existing one with fewer replicas is updated or refused as
    /// `options.update` says (see [`crate::streams`]).
    pub async fn open_with(
        client: async_nats::Client,
        subjects: Subjects,
        options: StreamOptions,
    ) -> Result<Self, BusError> {
        let js = jetstream::new(client);
        open_stream(
            &js,
            stream::Config {
                name: subjects.inbox_stream(),
                subjects: vec![subjects.all_inboxes()],
                storage: stream::StorageType::File,
                duplicate_window: DUPLICATE_WINDOW,
                description: Some(
                    "lineage parent inboxes: subagent reports and settlements".into(),
                ),
                ..Default::default()
            },
            options,
            "create the parent inbox stream",
        )
        .await?;
        Ok(ParentInbox {
            js,
            subjects,
            ack_wait: ACK_WAIT,
        })
    }

    /// The same inbox with another ack wait for the consumers it creates (default
    /// [`ACK_WAIT`]); a consumer that exists already keeps the wait it was created with.
    pub fn with_ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait = ack_wait;
        self
    }

    /// Publishes a report or settlement to its parent's inbox and waits for the stream's ack.
    /// Safe to retry: the dedup id makes a second copy a no-op. A publish whose outcome is
    /// unknown is sent again for up to [`crate::streams::UNKNOWN_OUTCOME_RETRY_FOR`]. `traceparent` (a W3C value, see
    /// [`crate::trace`]) goes along as a header so the parent's span joins the sender's trace.
    pub async fn publish(
        &self,
        message: &InboxMessage,
        traceparent: Option<&str>,
    ) -> Result<Published, BusError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            message.dedup_id().as_str(),
        );
        if let Some(tp) = traceparent {
            headers.insert(crate::trace::TRACEPARENT, tp);
        }
        let subject = self.subjects.parent_inbox(message.parent_session_id());
        let payload = bytes::Bytes::from(message.encode());
        // An unknown outcome (ack lost, the stream's leader being replaced, a reconnect) is
        // resolved by publishing the same message again: the dedup id drops a second copy.
        let started = std::time::Instant::now();
        let mut attempt = 0u32;
        loop {
            let outcome = match self
                .js
                .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
                .await
            {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(ack) => {
                    return Ok(Published {
                        sequence: ack.sequence,
                        duplicate: ack.duplicate,
                    })
                }
                Err(e) => match retry_pause(started, attempt).filter(|_| outcome_unknown(&e)) {
                    Some(pause) => {
                        tracing::warn!(dedup = %message.dedup_id(), error = %e, attempt, "parent inbox publish outcome unknown; sending it again");
                        attempt += 1;
                        tokio::time::sleep(pause).await;
                    }
                    None => return Err(BusError::js("acknowledge a parent inbox publish", e)),
                },
            }
        }
    }

    /// Opens (or re-opens after a restart) the durable consumer of one parent's inbox, with
    /// its description ([`ParentInbox::consumer_description`]).
    pub async fn consumer(&self, parent: &SessionId) -> Result<InboxConsumer, BusError> {
        let stream = self
            .js
            .get_stream(self.subjects.inbox_stream())
            .await
            .map_err(|e| BusError::js("open the parent inbox stream", e))?;
        let name = self.subjects.inbox_consumer(parent);
        let config = consumer::pull::Config {
            durable_name: Some(name.clone()),
            description: Some(self.consumer_description(parent)),
            filter_subject: self.subjects.parent_inbox(parent),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: self.ack_wait,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        };
        let mut consumer = stream
            .get_or_create_consumer(&name, config.clone())
            .await
            .map_err(|e| BusError::js("create the parent inbox consumer", e))?;
        if consumer.cached_info().config.description != config.description {
            // Made by an older node, without a description (or another one): said again, so
            // `nats consumer info` names its session. An update keeps the consumer's messages
            // and ack floor; it happens once per consumer (a top-level parent's lives until a
            // drain, so leaving it would leave it undescribed for good).
            consumer = stream
                .create_consumer(config)
                .await
                .map_err(|e| BusError::js("describe the parent inbox consumer", e))?;
        }
        let messages = consumer
            .messages()
            .await
            .map_err(|e| BusError::js("read the parent inbox", e))?;
        Ok(InboxConsumer {
            consumer,
            messages: Some(messages),
        })
    }

    /// The description of `parent`'s durable consumer (`nats consumer info` shows it):
    /// `lineage inbox of session <parent> (cluster <cluster>)`.
    pub fn consumer_description(&self, parent: &SessionId) -> String {
        format!(
            "lineage inbox of session {parent} (cluster {})",
            self.subjects.cluster()
        )
    }

    /// Deletes a parent's durable consumer once the parent is disposed.
    pub async fn delete_consumer(&self, parent: &SessionId) -> Result<(), BusError> {
        let stream = self
            .js
            .get_stream(self.subjects.inbox_stream())
            .await
            .map_err(|e| BusError::js("open the parent inbox stream", e))?;
        match stream
            .delete_consumer(&self.subjects.inbox_consumer(parent))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("not found") => Ok(()),
            Err(e) => Err(BusError::js("delete the parent inbox consumer", e)),
        }
    }

    /// Deletes the durable consumers of many disposed parents: lists the stream's consumers
    /// once and deletes only the ones that exist (a parent that was never live has none), up
    /// to [`DELETE_CONCURRENCY`] at a time. Returns how many were deleted; the first failure
    /// is returned after every deletion was tried.
    pub async fn delete_consumers(&self, parents: &[SessionId]) -> Result<usize, BusError> {
        if parents.is_empty() {
            return Ok(0);
        }
        let stream = self
            .js
            .get_stream(self.subjects.inbox_stream())
            .await
            .map_err(|e| BusError::js("open the parent inbox stream", e))?;
        let wanted: std::collections::HashSet<String> = parents
            .iter()
            .map(|p| self.subjects.inbox_consumer(p))
            .collect();
        let mut existing = Vec::new();
        let mut names = stream.consumer_names();
        while let Some(name) = names.next().await {
            let name = name.map_err(|e| BusError::js("list the parent inbox consumers", e))?;
            if wanted.contains(&name) {
                existing.push(name);
            }
        }
        let stream = &stream;
        let results: Vec<Result<(), BusError>> = futures::stream::iter(existing)
            .map(|name| async move {
                match stream.delete_consumer(&name).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.to_string().contains("not found") => Ok(()),
                    Err(e) => Err(BusError::js("delete the parent inbox consumer", e)),
                }
            })
            .buffer_unordered(DELETE_CONCURRENCY)
            .collect()
            .await;
        let deleted = results.iter().filter(|r| r.is_ok()).count();
        match results.into_iter().find_map(Result::err) {
            Some(e) => Err(e),
            None => Ok(deleted),
        }
    }
}

/// How many consumer deletions [`ParentInbox::delete_consumers`] keeps in flight.
pub const DELETE_CONCURRENCY: usize = 16;

/// One parent's inbox on JetStream, in order. Messages stay until [`InboxDelivery::ack`].
pub struct InboxConsumer {
    consumer: consumer::PullConsumer,
    /// `None` after a pull was answered "no responders" (the consumer had no leader yet: a
    /// stream just moved to three replicas, a server restarting): the client's stream would
    /// count that pull's batch as outstanding and ask again only when it expires (30 s), so
    /// the next call opens a fresh one after [`NO_RESPONDERS_PAUSE`].
    messages: Option<consumer::pull::Stream>,
}

/// How long [`InboxConsumer::next`] waits before pulling again after "no responders".
pub const NO_RESPONDERS_PAUSE: Duration = Duration::from_millis(200);

/// A delivered inbox message; ack it after the parent durably accepted it.
pub struct InboxDelivery {
    /// The decoded message; `Err` when the payload is malformed (ack it to drop it: it can
    /// never become valid, and it must not block the inbox).
    pub message: Result<InboxMessage, BusError>,
    traceparent: Option<String>,
    acknowledge: Box<dyn Acknowledge>,
}

impl InboxDelivery {
    /// A delivery of `message` (as decoded), with the publisher's `traceparent` header and the
    /// implementation's way to acknowledge it.
    pub fn new(
        message: Result<InboxMessage, BusError>,
        traceparent: Option<String>,
        acknowledge: Box<dyn Acknowledge>,
    ) -> Self {
        InboxDelivery {
            message,
            traceparent,
            acknowledge,
        }
    }

    /// Acknowledges the message: it will not be delivered again.
    pub async fn ack(&self) -> Result<(), BusError> {
        self.acknowledge.ack().await
    }

    /// Tells the inbox the message is still being worked on (resets its ack wait), so it is
    /// not redelivered while the parent retries accepting it.
    pub async fn in_progress(&self) -> Result<(), BusError> {
        self.acknowledge.in_progress().await
    }

    /// Gives the message back: it is delivered again after [`NAK_DELAY`] (not the ack wait), to
    /// whichever reader of the consumer asks then (a host that must not take it: its lease may have lapsed, or its
    /// agent stopped while the message was in hand).
    pub async fn nak(&self) -> Result<(), BusError> {
        self.acknowledge.nak().await
    }

    /// W3C trace context carried by the publisher, if any (the raw header value).
    pub fn traceparent(&self) -> Option<String> {
        self.traceparent.clone()
    }

    /// The publisher's trace context, when the header is present and valid.
    pub fn trace_context(&self) -> Option<crate::trace::TraceContext> {
        let value = self.traceparent.as_deref()?;
        match crate::trace::TraceContext::parse(value) {
            Ok(ctx) => Some(ctx),
            Err(e) => {
                tracing::debug!(error = %e, "ignoring an invalid traceparent header");
                None
            }
        }
    }
}

impl std::fmt::Debug for InboxDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxDelivery")
            .field("message", &self.message)
            .field("traceparent", &self.traceparent)
            .finish_non_exhaustive()
    }
}

/// A JetStream message's acks.
struct JetStreamAck(jetstream::Message);

impl Acknowledge for JetStreamAck {
    fn ack(&self) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            self.0
                .ack()
                .await
                .map_err(|e| BusError::js("acknowledge an inbox message", e))
        })
    }

    fn in_progress(&self) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            self.0
                .ack_with(jetstream::AckKind::Progress)
                .await
                .map_err(|e| BusError::js("mark an inbox message in progress", e))
        })
    }

    fn nak(&self) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            self.0
                .ack_with(jetstream::AckKind::Nak(Some(NAK_DELAY)))
                .await
                .map_err(|e| BusError::js("give an inbox message back", e))
        })
    }
}

impl InboxConsumer {
    /// Waits for the next message; `None` when the consumer is gone.
    pub async fn next(&mut self) -> Option<Result<InboxDelivery, BusError>> {
        let messages = match &mut self.messages {
            Some(messages) => messages,
            None => {
                tokio::time::sleep(NO_RESPONDERS_PAUSE).await;
                match self.consumer.messages().await {
                    Ok(messages) => self.messages.insert(messages),
                    Err(e) => return Some(Err(BusError::js("read the parent inbox", e))),
                }
            }
        };
        let raw = match messages.next().await? {
            Ok(raw) => raw,
            Err(e) => {
                if e.kind() == consumer::pull::MessagesErrorKind::NoResponders {
                    self.messages = None;
                }
                return Some(Err(BusError::js("receive from the parent inbox", e)));
            }
        };
        let message = InboxMessage::decode(&raw.payload).map_err(BusError::from);
        let traceparent = raw
            .headers
            .as_ref()
            .and_then(|h| h.get(crate::trace::TRACEPARENT))
            .map(|v| v.to_string());
        Some(Ok(InboxDelivery::new(
            message,
            traceparent,
            Box::new(JetStreamAck(raw)),
        )))
    }
}

impl InboxReader for InboxConsumer {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<InboxDelivery, BusError>>> {
        Box::pin(InboxConsumer::next(self))
    }
}

impl Inbox for ParentInbox {
    fn publish<'a>(
        &'a self,
        message: &'a InboxMessage,
        traceparent: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Published, BusError>> {
        Box::pin(ParentInbox::publish(self, message, traceparent))
    }

    fn consumer<'a>(
        &'a self,
        parent: &'a SessionId,
    ) -> BoxFuture<'a, Result<Box<dyn InboxReader>, BusError>> {
        Box::pin(async move {
            let consumer = ParentInbox::consumer(self, parent).await?;
            Ok(Box::new(consumer) as Box<dyn InboxReader>)
        })
    }

    fn delete_consumer<'a>(&'a self, parent: &'a SessionId) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(ParentInbox::delete_consumer(self, parent))
    }

    fn delete_consumers<'a>(
        &'a self,
        parents: &'a [SessionId],
    ) -> BoxFuture<'a, Result<usize, BusError>> {
        Box::pin(ParentInbox::delete_consumers(self, parents))
    }

    fn purge<'a>(&'a self, parents: &'a [SessionId]) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            ParentInbox::delete_consumers(self, parents).await?;
            let subjects = parents
                .iter()
                .map(|p| self.subjects.parent_inbox(p))
                .collect();
            crate::streams::purge_subjects(
                &self.js,
                &self.subjects.inbox_stream(),
                subjects,
                "purge parent inboxes",
            )
            .await
        })
    }
}
