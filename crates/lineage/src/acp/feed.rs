//! What the front door watches on the bus (F1, F2): every parent's `start`, `end` and inbox,
//! and every session's turn output, as [`Observed`] events (the tree keeps what is its own).
//!
//! Core NATS subscriptions on wildcards (the operator user may subscribe to all of them); the
//! inbox is watched as plain messages, never consumed: the parent's durable consumer still
//! receives every one. A child's label comes from the registry ([`Feed::label`]), asked by the
//! front door for the children of its own trees only. Every second the nodes' leases are read
//! from the registry ([`Observed::Lapsed`]).

use futures::StreamExt;
use lineage_bus::{BusError, Subjects};
use lineage_core::messages::{InboxMessage, LifecycleEvent};
use lineage_core::output::TurnOutput;
use lineage_registry::{Consistency, RegistryClient};

use super::tree::Observed;

/// How often the nodes' leases are read (a child on a node that died is shown `unknown`).
const LEASES_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The front door's subscriptions.
pub(crate) struct Feed {
    starts: async_nats::Subscriber,
    output: async_nats::Subscriber,
    inboxes: async_nats::Subscriber,
    ends: async_nats::Subscriber,
    registry: RegistryClient,
    /// When to read the nodes' leases again.
    leases: tokio::time::Interval,
}

async fn subscribe(
    client: &async_nats::Client,
    subject: String,
) -> Result<async_nats::Subscriber, BusError> {
    client.subscribe(subject).await.map_err(|e| BusError::Nats {
        op: "subscribe to the cluster's lifecycle, inboxes and output",
        reason: e.to_string(),
    })
}

impl Feed {
    /// Subscribes (and flushes, so what is published next is seen).
    pub(crate) async fn open(
        client: &async_nats::Client,
        subjects: &Subjects,
    ) -> Result<Feed, BusError> {
        let feed = Feed {
            starts: subscribe(client, subjects.all_parent_starts()).await?,
            output: subscribe(client, subjects.all_session_outputs()).await?,
            inboxes: subscribe(client, subjects.all_inboxes()).await?,
            ends: subscribe(client, subjects.all_parent_ends()).await?,
            registry: RegistryClient::new(client.clone(), subjects.cluster().to_owned()),
            leases: {
                let mut every = tokio::time::interval(LEASES_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                every
            },
        };
        client.flush().await.map_err(|e| BusError::Nats {
            op: "subscribe to the cluster's lifecycle, inboxes and output",
            reason: e.to_string(),
        })?;
        Ok(feed)
    }

    /// The next event; `None` once the connection closed. Malformed messages are skipped.
    pub(crate) async fn next(&mut self) -> Option<Observed> {
        loop {
            // Starts first: a child is learned before its traffic when both are ready.
            let (kind, msg) = tokio::select! {
                biased;
                m = self.starts.next() => ("start", m?),
                m = self.output.next() => ("output", m?),
                m = self.inboxes.next() => ("inbox", m?),
                m = self.ends.next() => ("end", m?),
                _ = self.leases.tick() => match self.lapsed().await {
                    Some(event) => return Some(event),
                    None => continue,
                },
            };
            match self.decode(kind, &msg.payload).await {
                Some(event) => return Some(event),
                None => continue,
            }
        }
    }

    async fn decode(&self, kind: &str, payload: &[u8]) -> Option<Observed> {
        let skip = |what: &str, e: &dyn std::fmt::Display| {
            tracing::debug!(error = %e, "skipped a malformed {what} message");
            None
        };
        match kind {
            "output" => match TurnOutput::decode(payload) {
                Ok(o) => Some(Observed::Output(o)),
                Err(e) => skip("turn output", &e),
            },
            "inbox" => match InboxMessage::decode(payload) {
                Ok(InboxMessage::Report(r)) => Some(Observed::Report {
                    parent: r.parent_session_id,
                    child: r.sender_session_id,
                    seq: r.seq,
                    content: r.content,
                }),
                // A settlement is shown by the child's `subagent/end`.
                Ok(InboxMessage::Settled(_)) => None,
                Err(e) => skip("inbox", &e),
            },
            _ => match LifecycleEvent::decode(payload) {
                Ok(LifecycleEvent::Start(info)) => Some(Observed::Start {
                    parent: info.parent_session_id,
                    child: info.child_id,
                    label: None,
                    provider: info.provider,
                    node: Some(info.node),
                }),
                Ok(LifecycleEvent::End(info)) => Some(Observed::End {
                    parent: info.parent_session_id,
                    child: info.child_id,
                    stop_reason: info.stop_reason,
                }),
                Err(e) => skip("lifecycle", &e),
            },
        }
    }

    /// The nodes whose lease has lapsed, from the registry (`None` when it cannot be read now:
    /// nothing is concluded from silence).
    async fn lapsed(&self) -> Option<Observed> {
        let nodes = self.registry.nodes(Consistency::Linearizable).await.ok()?;
        let now = crate::client::now_ms();
        Some(Observed::Lapsed {
            nodes: nodes
                .into_iter()
                .filter(|n| n.lease_expires_at_ms <= now)
                .map(|n| n.node)
                .collect(),
        })
    }

    /// The child's label from its registry record (none when unreadable). Asked only for a
    /// child of a session the tree knows: other trees' births cost nothing.
    pub(crate) async fn label(&self, child: &lineage_core::ids::SessionId) -> Option<String> {
        let record = self
            .registry
            .session(child.clone(), Consistency::Linearizable)
            .await
            .ok()??;
        label_of(&record)
    }
}

/// A record's label, from its descriptor.
pub(crate) fn label_of(record: &lineage_registry::SessionRecord) -> Option<String> {
    record
        .descriptor
        .as_ref()?
        .label()
        .map(std::borrow::Cow::into_owned)
}
