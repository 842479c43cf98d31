//! [`read_subject`]: every message of one subject of a stream, in order, by batched direct
//! gets (`$JS.API.DIRECT.GET.<stream>` with `next_by_subj`, [`READ_BATCH`] messages per round
//! trip, each batch ended by the server's `204 EOB` status). No consumer is made, so a read
//! needs no consumer permission and leaves nothing behind. The session logs
//! ([`crate::events::EventLogStore::read`]) and the workspace objects' chunks
//! ([`crate::workspace`]) are read this way; both streams have `allow_direct`.

use std::time::Duration;

use futures::StreamExt;

use crate::error::BusError;

/// Messages asked for per direct-get batch.
pub const READ_BATCH: usize = 256;

/// How long a read waits for the next message of a batch.
const READ_WAIT: Duration = Duration::from_secs(5);

/// A numeric header of a direct get reply.
fn header_u64(
    msg: &async_nats::Message,
    name: impl async_nats::header::IntoHeaderName,
) -> Option<u64> {
    msg.headers.as_ref()?.get(name)?.as_str().parse().ok()
}

/// Calls `each(stream sequence, payload)` for every message on `subject` of `stream` after
/// stream sequence `after`, in order; `op` names the read in errors.
pub(crate) async fn read_subject(
    client: &async_nats::Client,
    stream: &str,
    subject: &str,
    after: u64,
    op: &'static str,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), BusError>,
) -> Result<(), BusError> {
    let api = format!("$JS.API.DIRECT.GET.{stream}");
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| BusError::nats(op, e))?;
    let mut last = after;
    loop {
        let ask = serde_json::json!({
            "seq": last + 1,
            "next_by_subj": subject,
            "batch": READ_BATCH,
        });
        client
            .publish_with_reply(api.clone(), inbox.clone(), ask.to_string().into())
            .await
            .map_err(|e| BusError::nats(op, e))?;
        let more = loop {
            let msg = tokio::time::timeout(READ_WAIT, replies.next())
                .await
                .map_err(|_| BusError::Timeout {
                    op,
                    millis: READ_WAIT.as_millis() as u64,
                })?
                .ok_or_else(|| BusError::JetStream {
                    op,
                    reason: "the reply subscription closed".to_owned(),
                })?;
            match msg.status.map(|s| s.as_u16()) {
                None => {
                    let seq =
                        header_u64(&msg, async_nats::header::NATS_SEQUENCE).ok_or_else(|| {
                            BusError::JetStream {
                                op,
                                reason: "a direct get reply without Nats-Sequence".to_owned(),
                            }
                        })?;
                    last = seq;
                    each(seq, &msg.payload)?;
                }
                // End of this batch: more to read when the server says so.
                Some(204) => break header_u64(&msg, "Nats-Num-Pending").unwrap_or(0) > 0,
                // Nothing (more) on the subject.
                Some(404) => break false,
                Some(code) => {
                    return Err(BusError::JetStream {
                        op,
                        reason: format!(
                            "direct get answered {code} {}",
                            msg.description.as_deref().unwrap_or("")
                        ),
                    })
                }
            }
        };
        if !more {
            break;
        }
    }
    let _ = replies.unsubscribe().await;
    Ok(())
}
