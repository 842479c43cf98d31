//! A turn's output as it comes (F1), on core NATS: `lineage.<cluster>.session.<id>.output`.
//!
//! Best effort, like the lifecycle events: a watcher sees what is published after it
//! subscribed, in publish order per session (one hosting node publishes a session's output on
//! one connection). Not captured by any stream: the session's log is the record.

use futures::StreamExt;
use lineage_core::ids::SessionId;
use lineage_core::output::TurnOutput;

use crate::error::BusError;
use crate::ports::{BoxFuture, TurnOutputFeed, TurnOutputs};
use crate::subjects::Subjects;

/// Turn output on core NATS: the NATS implementation of [`TurnOutputs`].
#[derive(Clone)]
pub struct NatsTurnOutputs {
    client: async_nats::Client,
    subjects: Subjects,
}

impl NatsTurnOutputs {
    /// Turn output of `subjects`' cluster on `client`.
    pub fn new(client: async_nats::Client, subjects: Subjects) -> Self {
        NatsTurnOutputs { client, subjects }
    }
}

impl TurnOutputs for NatsTurnOutputs {
    fn publish<'a>(&'a self, output: &'a TurnOutput) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            self.client
                .publish(
                    self.subjects.session_output(output.session()),
                    output.encode().into(),
                )
                .await
                .map_err(|e| BusError::Nats {
                    op: "publish turn output",
                    reason: e.to_string(),
                })
        })
    }

    fn watch<'a>(
        &'a self,
        session: Option<&'a SessionId>,
    ) -> BoxFuture<'a, Result<Box<dyn TurnOutputFeed>, BusError>> {
        Box::pin(async move {
            let subject = match session {
                Some(s) => self.subjects.session_output(s),
                None => self.subjects.all_session_outputs(),
            };
            let sub = self
                .client
                .subscribe(subject)
                .await
                .map_err(|e| BusError::Nats {
                    op: "subscribe to turn output",
                    reason: e.to_string(),
                })?;
            // On the server before the watch is handed out: what is published next is seen.
            self.client.flush().await.map_err(|e| BusError::Nats {
                op: "subscribe to turn output",
                reason: e.to_string(),
            })?;
            Ok(Box::new(NatsTurnOutputFeed { sub }) as Box<dyn TurnOutputFeed>)
        })
    }
}

struct NatsTurnOutputFeed {
    sub: async_nats::Subscriber,
}

impl TurnOutputFeed for NatsTurnOutputFeed {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<TurnOutput, BusError>>> {
        Box::pin(async move {
            let msg = self.sub.next().await?;
            Some(TurnOutput::decode(&msg.payload).map_err(BusError::from))
        })
    }
}
