//! `subagent/start` and `subagent/end` on core NATS (E1, E2).
//!
//! Each event goes to its *parent's* subject, so a subscriber on one parent sees exactly that
//! parent's direct children, never grandchildren.

use futures::StreamExt;
use lineage_core::ids::SessionId;
use lineage_core::messages::LifecycleEvent;

use crate::error::BusError;
use crate::ports::{BoxFuture, Lifecycle, LifecycleFeed};
use crate::subjects::Subjects;

/// Publishes a lifecycle event on its parent's `start` or `end` subject, with the current trace
/// context ([`crate::trace::current`]) as its `traceparent` header.
pub async fn publish(
    client: &async_nats::Client,
    subjects: &Subjects,
    event: &LifecycleEvent,
) -> Result<(), BusError> {
    let subject = match event {
        LifecycleEvent::Start(info) => subjects.parent_start(&info.parent_session_id),
        LifecycleEvent::End(info) => subjects.parent_end(&info.parent_session_id),
    };
    let sent = match crate::trace::current() {
        Some(ctx) => {
            let mut headers = async_nats::HeaderMap::new();
            ctx.inject(&mut headers);
            client
                .publish_with_headers(subject, headers, event.encode().into())
                .await
        }
        None => client.publish(subject, event.encode().into()).await,
    };
    sent.map_err(|e| BusError::Nats {
        op: "publish a lifecycle event",
        reason: e.to_string(),
    })
}

/// A live feed of one parent's children's lifecycle events.
pub struct LifecycleWatch {
    start: async_nats::Subscriber,
    end: async_nats::Subscriber,
}

impl LifecycleWatch {
    /// Subscribes to `<parent>`'s start and end subjects.
    pub async fn subscribe(
        client: &async_nats::Client,
        subjects: &Subjects,
        parent: &SessionId,
    ) -> Result<Self, BusError> {
        let sub = |s: String| async move {
            client.subscribe(s).await.map_err(|e| BusError::Nats {
                op: "subscribe to lifecycle events",
                reason: e.to_string(),
            })
        };
        let start = sub(subjects.parent_start(parent)).await?;
        let end = sub(subjects.parent_end(parent)).await?;
        Ok(LifecycleWatch { start, end })
    }

    /// The next event, from either subject; `None` when both subscriptions closed.
    ///
    /// The start subscription is polled first (`biased`): a child's `start` is published before
    /// its `end` on one connection and so is dispatched first, but an unbiased select over two
    /// ready subscriptions picks at random and could hand out the `end` first.
    pub async fn next(&mut self) -> Option<Result<LifecycleEvent, BusError>> {
        let msg = tokio::select! {
            biased;
            m = self.start.next() => m,
            m = self.end.next() => m,
        }?;
        Some(LifecycleEvent::decode(&msg.payload).map_err(BusError::from))
    }
}

/// Lifecycle events on core NATS: the NATS implementation of [`crate::ports::Lifecycle`].
#[derive(Clone)]
pub struct NatsLifecycle {
    client: async_nats::Client,
    subjects: Subjects,
}

impl NatsLifecycle {
    /// Lifecycle events of `subjects`' cluster on `client`.
    pub fn new(client: async_nats::Client, subjects: Subjects) -> Self {
        NatsLifecycle { client, subjects }
    }
}

impl Lifecycle for NatsLifecycle {
    fn publish<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(publish(&self.client, &self.subjects, event))
    }

    fn watch<'a>(
        &'a self,
        parent: &'a SessionId,
    ) -> BoxFuture<'a, Result<Box<dyn LifecycleFeed>, BusError>> {
        Box::pin(async move {
            let watch = LifecycleWatch::subscribe(&self.client, &self.subjects, parent).await?;
            Ok(Box::new(watch) as Box<dyn LifecycleFeed>)
        })
    }
}

impl LifecycleFeed for LifecycleWatch {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<LifecycleEvent, BusError>>> {
        Box::pin(LifecycleWatch::next(self))
    }
}
