//! Messages into an agent: what a sender hands over, and the engine's view of it (M1–M3).

use lineage_core::engine::Arrival;
use lineage_core::ids::RequestId;
use lineage_core::messages::InboxMessage;

use lineage_drivers::driver::TurnMessage;

/// What comes into an agent.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A user message (followup), with its request id when the sender gave one (M3: a retry
    /// with the same id is recognised).
    User {
        content: String,
        request_id: Option<RequestId>,
    },
    /// A child's report or settlement from the durable inbox.
    Inbox(InboxMessage),
}

/// How a delivered message was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivered {
    /// Accepted into the log now.
    Accepted,
    /// Accepted before under the same dedup id: nothing added.
    Duplicate,
}

/// The engine's view of an incoming message, and an inbox message's lag (acceptance time minus
/// its `at_ms`).
pub(super) fn arrival_of(incoming: Incoming, now_ms: u64) -> (Arrival, Option<u64>) {
    match incoming {
        Incoming::User {
            content,
            request_id,
        } => (
            Arrival {
                message: TurnMessage::User { content },
                wake: true,
                dedup_id: None,
                request_id: request_id.map(|r| r.to_string()),
                settled_child: None,
            },
            None,
        ),
        Incoming::Inbox(msg) => {
            let dedup = msg.dedup_id();
            let lag = now_ms.saturating_sub(msg.at_ms());
            let arrival = match msg {
                InboxMessage::Report(r) => Arrival {
                    wake: matches!(r.delivery, lineage_core::messages::Delivery::Wakeup),
                    message: TurnMessage::SubagentReport {
                        sender_session_id: r.sender_session_id,
                        content: r.content,
                    },
                    dedup_id: Some(dedup),
                    request_id: None,
                    settled_child: None,
                },
                InboxMessage::Settled(s) => Arrival {
                    message: TurnMessage::SubagentSettled {
                        sender_session_id: s.sender_session_id.clone(),
                        summary: s.summary.as_str().to_owned(),
                        changed: s.changes.as_ref().map(|c| c.changed).filter(|n| *n > 0),
                    },
                    wake: true,
                    dedup_id: Some(dedup),
                    request_id: None,
                    settled_child: Some(s.sender_session_id),
                },
            };
            (arrival, Some(lag))
        }
    }
}
