//! Reports (M1) and the durable inbox consumer (N2).
//!
//! Child side (the engine's `report`, executed by the agent task): a report is logged in the child's own log (`outbox/report`, with its outbox
//! sequence number) and published to the direct parent's inbox subject with `Nats-Msg-Id =
//! <child>-<seq>`, wherever the parent runs.
//!
//! Parent side: every live agent reads its own inbox through a durable consumer. Each message
//! is handed to the agent task, which accepts it into its log (skipping a dedup id the log
//! already holds) and only then answers; the consumer acks after that answer. So a parent that
//! was down finds every queued message when it comes back, and each takes effect exactly once.
//! `wakeup` starts a parent turn when the parent is idle; `quiet` only queues for the next turn.

use std::sync::Arc;
use std::time::Duration;

use lineage_bus::control::ErrorCode;

use lineage_core::ids::SessionId;
use lineage_core::messages::InboxMessage;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::agent::cmd::AgentCmd;
use crate::agent::mail::Incoming;
use crate::fence::LeaseWait;
use crate::shared::Shared;
use crate::telemetry::op_span;

/// Reads `session`'s durable inbox until `stop`, handing each message to the agent and acking
/// it once the agent durably accepted it.
pub(crate) fn spawn_inbox_consumer(
    shared: &Arc<Shared>,
    session: SessionId,
    agent: mpsc::UnboundedSender<AgentCmd>,
    stop: CancellationToken,
) {
    let inbox = shared.bus.inbox.clone();
    let node = shared.node().clone();
    let shared = shared.clone();
    tokio::spawn(async move {
        let Some(mut consumer) = open_consumer(&*inbox, &session, &stop).await else {
            return;
        };
        tracing::debug!(%session, "inbox consumer reading");
        loop {
            let next = tokio::select! {
                n = consumer.next() => n,
                _ = stop.cancelled() => return,
            };
            let delivery = match next {
                None => {
                    // The consumer is gone (deleted, or its stream ended under a fault) while
                    // the session lives: opened again, or its notices would wait for good.
                    tracing::warn!(%session, "the inbox consumer ended; opening it again");
                    match open_consumer(&*inbox, &session, &stop).await {
                        Some(again) => {
                            consumer = again;
                            continue;
                        }
                        None => return,
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(%session, error = %e, "inbox receive failed");
                    continue;
                }
                Some(Ok(d)) => d,
            };
            let message = match &delivery.message {
                Ok(m) => {
                    tracing::debug!(%session, dedup = %m.dedup_id(), "inbox message delivered");
                    m.clone()
                }
                Err(e) => {
                    // Malformed: it can never become valid; drop it so it does not block.
                    tracing::warn!(%session, error = %e, "dropping a malformed inbox message");
                    let _ = delivery.ack().await;
                    continue;
                }
            };
            if message.parent_session_id() != &session {
                tracing::warn!(%session, "dropping an inbox message addressed to another parent");
                let _ = delivery.ack().await;
                continue;
            }
            // The delivery joins the sender's trace (its `traceparent` header).
            let kind = match &message {
                InboxMessage::Report(_) => "subagent-report",
                InboxMessage::Settled(_) => "subagent-settled",
            };
            // K1: taken only while this node surely holds its lease; else another node may
            // host the session by now and read the same consumer (crate::fence).
            if shared.until_lease_held(&session, &stop, None).await != LeaseWait::Held {
                give_back(
                    consumer,
                    delivery,
                    &session,
                    "the agent stopped after a lease lapse",
                )
                .await;
                return;
            }
            let op = op_span!("inbox", node, delivery.trace_context(); sender = %message.sender_session_id(), kind = kind);
            op.record("session", &session);
            // Accepting can fail for a while without the agent being gone (its log append
            // cannot reach JetStream: a NATS server restarting, a stream leader being
            // replaced). The same message is offered again, in order, until the agent takes
            // it; meanwhile the server is told it is in progress so it is not redelivered.
            let mut attempt = 0u32;
            loop {
                let (tx, rx) = oneshot::channel();
                if agent
                    .send(AgentCmd::Deliver {
                        incoming: Incoming::Inbox(message.clone()),
                        reply: tx,
                        trace: Some(op.ctx),
                    })
                    .is_err()
                {
                    give_back(consumer, delivery, &session, "the agent is gone").await;
                    return;
                }
                let accepted = op
                    .enter(async {
                        tokio::select! {
                            r = rx => Some(r),
                            _ = stop.cancelled() => None,
                        }
                    })
                    .await;
                let Some(accepted) = accepted else {
                    give_back(consumer, delivery, &session, "the agent stopped").await;
                    return;
                };
                match accepted {
                    Ok(Ok(outcome)) => {
                        tracing::debug!(%session, dedup = %message.dedup_id(), ?outcome, "inbox message taken");
                        if let Err(e) = delivery.ack().await {
                            tracing::warn!(%session, error = %e, "inbox ack failed; the message will be redelivered and deduplicated");
                        }
                        break;
                    }
                    Ok(Err(e)) if e.code() == ErrorCode::Unavailable => {
                        attempt += 1;
                        tracing::warn!(%session, error = %e, attempt, "message not accepted yet; offering it again");
                        let _ = delivery.in_progress().await;
                        let pause = Duration::from_millis(100u64 << attempt.min(5));
                        tokio::select! {
                            _ = tokio::time::sleep(pause.min(Duration::from_secs(2))) => {}
                            _ = stop.cancelled() => {
                                give_back(consumer, delivery, &session, "the agent stopped").await;
                                return;
                            }
                        }
                    }
                    Ok(Err(e)) => {
                        op.fail(&e);
                        tracing::warn!(%session, error = %e, "message not accepted; leaving it in the inbox");
                        return;
                    }
                    Err(_) => {
                        give_back(consumer, delivery, &session, "no answer from the agent").await;
                        return;
                    }
                }
            }
        }
    });
}

/// Gives a message this reader will not take back to the consumer: the reader stops first
/// (else the server may hand it back to this reader's own pending pull), then the nak makes it
/// due again after `lineage_bus::inbox::NAK_DELAY` (200 ms) for the session's next reader,
/// instead of after the ack wait.
async fn give_back(
    consumer: Box<dyn lineage_bus::ports::InboxReader>,
    delivery: lineage_bus::inbox::InboxDelivery,
    session: &SessionId,
    why: &str,
) {
    drop(consumer);
    let dedup = delivery.message.as_ref().map(|m| m.dedup_id()).ok();
    match delivery.nak().await {
        Ok(()) => tracing::debug!(%session, ?dedup, why, "inbox message given back"),
        Err(e) => {
            tracing::debug!(%session, ?dedup, why, error = %e, "inbox message not given back; it comes again after its ack wait")
        }
    }
}

/// Opens `session`'s durable inbox consumer, trying again (100 ms doubling to 2 s apart) while
/// it cannot: a nats-server restarting, a link down, a stream leader being elected. Issue 12:
/// a parent whose consumer failed to open once read no notice again, so its children's
/// reports and settlements waited in the stream until it was resumed. `None` once `stop`.
async fn open_consumer(
    inbox: &dyn lineage_bus::Inbox,
    session: &SessionId,
    stop: &CancellationToken,
) -> Option<Box<dyn lineage_bus::ports::InboxReader>> {
    let mut attempt = 0u32;
    loop {
        let opened = tokio::select! {
            c = inbox.consumer(session) => c,
            _ = stop.cancelled() => return None,
        };
        match opened {
            Ok(consumer) => {
                if attempt > 0 {
                    tracing::info!(%session, attempt, "inbox consumer open");
                }
                return Some(consumer);
            }
            Err(e) => {
                attempt += 1;
                tracing::warn!(%session, error = %e, attempt, "cannot open the inbox consumer; trying again");
                let pause =
                    Duration::from_millis(100u64 << attempt.min(5)).min(Duration::from_secs(2));
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.cancelled() => return None,
                }
            }
        }
    }
}
