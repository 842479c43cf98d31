//! Writes of several commands in one request, and the coalescing of writes issued at once.
//!
//! [`RegistryClient::write_many`] sends a JSON array of commands (see the members' side in
//! `service/write_many.rs`). A member older than arrays refuses one as a command it cannot
//! read (malformed, in serde's words): then the commands go one at a time, in order, so a
//! client may be upgraded before the voters.
//!
//! [`Coalescer`]: every [`RegistryClient::write`] goes through its client's queue. A caller
//! that finds fewer than [`COALESCE_SENDERS`] requests on their way becomes a sender: it sends
//! what is queued (up to [`COALESCE_MAX`] commands; one alone as itself, several as an array),
//! hands each caller its response, and goes on until the queue is empty. A write with nothing
//! else under way is sent at once, alone; writes issued while requests are on their way (a
//! node's agents at the same moment) go together, each with its own request id and response.
//! What that saves is a request, a reply and a member's task per command.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::oneshot;

use super::RegistryClient;
use crate::error::RegistryError;
use crate::types::{Command, CommandResponse, RegistryRefusal};
use crate::wire::WRITE_MANY_ARRAY;

/// Requests of queued writes a client keeps on their way at once.
pub const COALESCE_SENDERS: usize = 4;

/// The most queued writes one request carries.
pub const COALESCE_MAX: usize = 64;

/// A client's queue of writes waiting to go (shared by its clones with the same identity and
/// deadlines).
#[derive(Default)]
pub(crate) struct Coalescer {
    queue: Mutex<VecDeque<Queued>>,
    senders: AtomicUsize,
}

/// A write waiting in the queue, and where its caller waits for the answer.
struct Queued {
    cmd: Command,
    answer: oneshot::Sender<Result<CommandResponse, RegistryError>>,
}

impl Coalescer {
    fn push(&self, queued: Queued) {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push_back(queued);
    }

    fn take(&self, most: usize) -> Vec<Queued> {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let n = queue.len().min(most);
        queue.drain(..n).collect()
    }

    fn is_empty(&self) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_empty()
    }
}

/// Whether `e` is an older member's refusal of an array it cannot read as one command: a
/// refusal of the request as a whole as malformed, in words no member that reads arrays uses
/// ([`WRITE_MANY_ARRAY`]).
fn takes_no_arrays(e: &RegistryError) -> bool {
    matches!(
        e,
        RegistryError::Refused(RegistryRefusal::Malformed { reason })
            if !reason.starts_with(WRITE_MANY_ARRAY)
    )
}

impl RegistryClient {
    /// Sends several commands in one request (at most [`crate::wire::WRITE_MANY_MAX`]) and
    /// returns one response per command, in order, refusals included. They are applied in
    /// that order, each on its own (not a transaction: a refused one leaves the others). The
    /// whole request is retried until the deadline like [`Self::write`]; commands already
    /// applied are recognised by their request ids. A member older than arrays gets them one
    /// at a time.
    pub async fn write_many(
        &self,
        cmds: &[Command],
    ) -> Result<Vec<CommandResponse>, RegistryError> {
        match cmds {
            [] => Ok(Vec::new()),
            [one] => Ok(vec![self.write_alone(one).await?]),
            _ => match self.send_array(cmds).await {
                Err(e) if takes_no_arrays(&e) => {
                    tracing::debug!("the registry member takes no arrays of commands; writing them one at a time");
                    let mut responses = Vec::with_capacity(cmds.len());
                    for cmd in cmds {
                        responses.push(self.write_alone(cmd).await?);
                    }
                    Ok(responses)
                }
                other => other,
            },
        }
    }

    /// [`Self::write`]: queued, then sent with whatever else is queued (module documentation).
    pub(super) async fn write_coalesced(
        &self,
        cmd: Command,
    ) -> Result<CommandResponse, RegistryError> {
        let (answer, answered) = oneshot::channel();
        self.coalescer.push(Queued { cmd, answer });
        self.start_sender();
        answered.await.unwrap_or_else(|_| {
            Err(RegistryError::Unexpected(
                "a queued registry write was dropped unanswered".into(),
            ))
        })
    }

    /// Starts a sender of the queue, unless [`COALESCE_SENDERS`] are sending (they take it).
    /// A task of its own: a caller that stops waiting (a timeout around its write) stops
    /// nobody else's.
    fn start_sender(&self) {
        let c = &self.coalescer;
        if c.senders.fetch_add(1, Ordering::SeqCst) >= COALESCE_SENDERS {
            c.senders.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let client = self.clone();
        tokio::spawn(async move { client.send_queued().await });
    }

    /// A sender: sends what is queued until the queue is empty.
    async fn send_queued(self) {
        let c = self.coalescer.clone();
        loop {
            loop {
                let batch = c.take(COALESCE_MAX);
                if batch.is_empty() {
                    break;
                }
                self.send_batch(batch).await;
            }
            c.senders.fetch_sub(1, Ordering::SeqCst);
            // A write queued after the last look, by a caller that found every sender busy, is
            // taken here, as a sender again; or, when the others fill the room again, by them
            // (each looks once more after it stops, so the last one out takes it).
            if c.is_empty() {
                return;
            }
            if c.senders.fetch_add(1, Ordering::SeqCst) >= COALESCE_SENDERS {
                c.senders.fetch_sub(1, Ordering::SeqCst);
                return;
            }
        }
    }

    /// One request for `batch`, and each caller's answer.
    async fn send_batch(&self, batch: Vec<Queued>) {
        if let [_] = batch.as_slice() {
            if let Some(Queued { cmd, answer }) = batch.into_iter().next() {
                let _ = answer.send(self.write_alone(&cmd).await);
            }
            return;
        }
        let (cmds, answers): (Vec<Command>, Vec<_>) =
            batch.into_iter().map(|q| (q.cmd, q.answer)).unzip();
        match self.write_many(&cmds).await {
            Ok(responses) => {
                for (answer, response) in answers.into_iter().zip(responses) {
                    let _ = answer.send(Ok(response));
                }
            }
            Err(e) => {
                for answer in answers {
                    let _ = answer.send(Err(e.clone()));
                }
            }
        }
    }
}
