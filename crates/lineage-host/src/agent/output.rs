//! A turn's output as it comes (F1): `turn-start`, the streamed text in `chunk`s, `turn-end`.
//!
//! Best effort: the log is the record. A publish that fails is logged and the turn goes on.
//! Chunks keep their order: one task publishes them, in the order the driver streamed them, and
//! the `turn-end` goes out only after the last chunk (and after the turn's end is durable).

use std::sync::Arc;

use lineage_bus::TurnOutputs;
use lineage_core::engine::TurnOutcome;
use lineage_core::ids::SessionId;
use lineage_core::output::{TurnEndOutcome, TurnOutput};
use lineage_drivers::driver::OutputSink;
use tokio::sync::mpsc;

/// One turn's output stream.
pub(super) struct TurnStream {
    output: Arc<dyn TurnOutputs>,
    session: SessionId,
    turn: u64,
    tx: mpsc::UnboundedSender<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

async fn publish(output: &dyn TurnOutputs, message: TurnOutput) {
    if let Err(e) = output.publish(&message).await {
        tracing::debug!(session = %message.session(), error = %e, "cannot publish turn output");
    }
}

impl TurnStream {
    /// Publishes the turn's start and starts the chunk publisher.
    pub(super) async fn open(
        output: Arc<dyn TurnOutputs>,
        session: SessionId,
        turn: u64,
        request_ids: Vec<String>,
        at_ms: u64,
    ) -> Self {
        publish(
            output.as_ref(),
            TurnOutput::TurnStart {
                session_id: session.clone(),
                turn,
                request_ids,
                at_ms,
            },
        )
        .await;
        let (tx, mut rx) = mpsc::unbounded_channel::<Option<String>>();
        let (out, id) = (output.clone(), session.clone());
        let task = tokio::spawn(async move {
            let mut seq = 0;
            while let Some(Some(text)) = rx.recv().await {
                seq += 1;
                let chunk = TurnOutput::Chunk {
                    session_id: id.clone(),
                    turn,
                    seq,
                    text,
                };
                publish(out.as_ref(), chunk).await;
            }
        });
        TurnStream {
            output,
            session,
            turn,
            tx,
            task,
        }
    }

    /// Where the driver streams the turn's text.
    pub(super) fn sink(&self) -> OutputSink {
        let tx = self.tx.clone();
        Arc::new(move |text: String| {
            let _ = tx.send(Some(text));
        })
    }

    /// Publishes the last chunks, then the turn's end.
    pub(super) async fn close(
        self,
        outcome: &TurnOutcome,
        reply: Option<String>,
        usage: Option<lineage_core::usage::SessionUsage>,
        at_ms: u64,
    ) {
        let TurnStream {
            output,
            session,
            turn,
            tx,
            task,
        } = self;
        // The end marker: the task stops there, whoever still holds a sink (a tool call that
        // outlived its turn); text streamed after it is dropped.
        let _ = tx.send(None);
        let _ = task.await;
        let (outcome, error) = match outcome {
            TurnOutcome::Completed => (TurnEndOutcome::Completed, None),
            TurnOutcome::Failed(e) => (TurnEndOutcome::Failed, Some(e.clone())),
            TurnOutcome::Cancelled => (TurnEndOutcome::Cancelled, None),
        };
        let end = TurnOutput::TurnEnd {
            session_id: session,
            turn,
            outcome,
            error,
            reply,
            usage,
            at_ms,
        };
        publish(output.as_ref(), end).await;
    }
}
