//! Turn output in memory: the twin of [`crate::output::NatsTurnOutputs`].

use lineage_core::ids::SessionId;
use lineage_core::output::TurnOutput;
use tokio::sync::broadcast;

use crate::error::BusError;
use crate::ports::{BoxFuture, TurnOutputFeed, TurnOutputs};

/// Output messages a slow watch may fall behind by before it is told it lost some.
pub const OUTPUT_BUFFER: usize = 4096;

/// Turn output in memory: a broadcast channel; a watch sees what is published after it opened.
#[derive(Clone)]
pub struct MemoryTurnOutputs {
    pub(super) tx: broadcast::Sender<TurnOutput>,
}

impl MemoryTurnOutputs {
    /// A channel nobody watches yet.
    pub(super) fn new() -> Self {
        let (tx, _) = broadcast::channel(OUTPUT_BUFFER);
        MemoryTurnOutputs { tx }
    }
}

impl TurnOutputs for MemoryTurnOutputs {
    fn publish<'a>(&'a self, output: &'a TurnOutput) -> BoxFuture<'a, Result<(), BusError>> {
        // Nobody listening is not an error: core NATS drops such a message too.
        let _ = self.tx.send(output.clone());
        Box::pin(async { Ok(()) })
    }

    fn watch<'a>(
        &'a self,
        session: Option<&'a SessionId>,
    ) -> BoxFuture<'a, Result<Box<dyn TurnOutputFeed>, BusError>> {
        let feed = Feed {
            rx: self.tx.subscribe(),
            session: session.cloned(),
        };
        Box::pin(async move { Ok(Box::new(feed) as Box<dyn TurnOutputFeed>) })
    }
}

struct Feed {
    rx: broadcast::Receiver<TurnOutput>,
    session: Option<SessionId>,
}

impl TurnOutputFeed for Feed {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<TurnOutput, BusError>>> {
        Box::pin(async move {
            loop {
                match self.rx.recv().await {
                    Ok(out) if self.session.as_ref().is_none_or(|s| s == out.session()) => {
                        return Some(Ok(out))
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(lost)) => {
                        return Some(Err(BusError::Nats {
                            op: "receive turn output",
                            reason: format!("the watch fell behind and lost {lost} messages"),
                        }))
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }
}
