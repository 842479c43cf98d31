//! Hedged requests for reads (G3, N3): a read sent to the members' queue group is answered by
//! whichever member NATS picks, and a member that is stopped (SIGSTOP, a hung process) keeps
//! its subscriptions until nats-server drops its connection, so a read routed to it gets no
//! reply. A read changes nothing, so it is safe to send again before the first copy has
//! answered: [`first_reply`] sends a copy every [`HEDGE_AFTER`] (at most [`MAX_COPIES`]) while
//! none has answered and returns the first reply. Only reads to the queue group are hedged (a
//! copy may reach another member; one to the leader's own subject would load the same member
//! again). Writes are not hedged: they are retried with their request id after a whole attempt
//! instead (see `RegistryClient::call`).

use std::time::Duration;

use async_nats::{Client, HeaderMap, Message, RequestError};
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

/// How long a read waits for an answer before it sends another copy.
pub const HEDGE_AFTER: Duration = Duration::from_millis(300);

/// The most copies of one read in flight within one attempt.
pub const MAX_COPIES: u32 = 8;

/// What an attempt of a (possibly hedged) request came to.
pub(crate) enum Outcome {
    /// A reply.
    Reply(Message),
    /// Every copy sent failed (e.g. no responders); the last error.
    Failed(RequestError),
    /// No copy answered within the budget.
    TimedOut,
}

/// Sends `payload` to `subject` and returns the first reply within `budget`; with `hedge`, sends
/// another copy every [`HEDGE_AFTER`] while none has answered (at most [`MAX_COPIES`]).
pub(crate) async fn first_reply(
    nats: &Client,
    subject: String,
    headers: Option<HeaderMap>,
    payload: Bytes,
    budget: Duration,
    hedge: bool,
) -> Outcome {
    let started = Instant::now();
    let deadline = started + budget;
    let send = || {
        let subject = subject.clone();
        let payload = payload.clone();
        match headers.clone() {
            Some(h) => nats.request_with_headers(subject, h, payload).left_future(),
            None => nats.request(subject, payload).right_future(),
        }
    };
    let mut in_flight = FuturesUnordered::new();
    in_flight.push(send());
    let mut sent = 1u32;
    let mut last_error = None;
    loop {
        let next_copy = (hedge && sent < MAX_COPIES).then(|| started + HEDGE_AFTER * sent);
        tokio::select! {
            Some(result) = in_flight.next(), if !in_flight.is_empty() => match result {
                Ok(msg) => return Outcome::Reply(msg),
                Err(e) => {
                    last_error = Some(e);
                    // Every copy sent has failed (no responders): the caller backs off and
                    // tries again; another copy now would fail the same way.
                    if in_flight.is_empty() {
                        break;
                    }
                }
            },
            _ = tokio::time::sleep_until(next_copy.unwrap_or(deadline)), if next_copy.is_some() => {
                in_flight.push(send());
                sent += 1;
            }
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    match last_error {
        Some(e) if in_flight.is_empty() => Outcome::Failed(e),
        _ => Outcome::TimedOut,
    }
}
