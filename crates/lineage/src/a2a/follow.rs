//! Following a task as its session's log grows (A1): the wait of a blocking `SendMessage`,
//! and the streams of `SendStreamingMessage` and `SubscribeToTask`.
//!
//! A stream starts with the task as it is, then carries each new log event as its update
//! ([`super::task::update_of`]) and ends when the task leaves `submitted`/`working` (after the
//! turn that took the streamed message, for a send), or with the terminal update of a session
//! that ended. The log is the cluster's (JetStream), so a stream goes on across a node that
//! dies under the task (its cut-short turn ends `interrupted`), and a client whose gateway
//! died subscribes again at another one.

use std::sync::Arc;

use a2a::{A2AError, StreamResponse, TaskState};
use futures::stream::BoxStream;
use futures::StreamExt;
use lineage_core::ids::SessionId;
use lineage_core::lifecycle::SessionState;

use super::handler::{Cluster, Read, POLL};
use super::task::{final_update, task_state, update_of};

/// When a stream ends.
pub(crate) enum Until {
    /// When the turn that took the message sent with this request id (`None`: the first
    /// prompt) ended and the task is no longer working.
    TurnOf(Option<String>),
    /// When the task is no longer submitted or working.
    Settled,
}

/// Whether the task in `read` is past what the follower waits for.
fn done(read: &Read, until: &Until) -> bool {
    let state = task_state(read.record.state, read.record.stop_reason, &read.log);
    if state.is_terminal() {
        return true;
    }
    let busy = matches!(state, TaskState::Submitted | TaskState::Working);
    match until {
        Until::Settled => !busy,
        Until::TurnOf(request) => {
            let ended = read
                .log
                .turn_that_took(request.as_deref())
                .and_then(|i| read.log.turn(i))
                .is_some_and(|t| t.end.is_some());
            ended && !busy
        }
    }
}

/// Reads what was appended after `read.cursor` (moving it), returning the new events, not yet
/// folded; the record is read again when `refresh` (and when the log says nothing new).
async fn step(
    cluster: &Cluster,
    read: &mut Read,
    refresh: bool,
) -> Result<Vec<lineage_core::log::SessionEvent>, A2AError> {
    let session = read.record.header.id().clone();
    let (events, cursor) = cluster
        .logs
        .read_after(&session, read.cursor)
        .await
        .map_err(|e| A2AError::internal(format!("reading the task's log: {e}")))?;
    read.cursor = cursor;
    if refresh || events.is_empty() {
        read.record = cluster.record(&session).await?;
    }
    Ok(events)
}

/// Waits until the turn that took the message (request id `request`; `None`: the first
/// prompt) ended, the session ended, or the gateway's turn timeout passed (then the task is
/// answered as it is: still working).
pub(crate) async fn wait(
    cluster: &Cluster,
    session: &SessionId,
    request: Option<&str>,
) -> Result<(), A2AError> {
    let mut read = cluster.read(session.as_str()).await?;
    let until = Until::TurnOf(request.map(str::to_owned));
    let deadline = tokio::time::Instant::now() + cluster.turn_timeout;
    let mut polls: u64 = 0;
    while !done(&read, &until) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        polls += 1;
        let events = step(cluster, &mut read, polls.is_multiple_of(10)).await?;
        read.log.fold(&events);
    }
    Ok(())
}

/// The stream of the task `session`: the task now, then its updates until `until`.
pub(crate) async fn stream(
    cluster: Arc<Cluster>,
    session: SessionId,
    until: Until,
) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    tokio::spawn(async move {
        let send = |item| tx.unbounded_send(item).is_ok();
        let mut read = match cluster.read(session.as_str()).await {
            Ok(read) => read,
            Err(e) => {
                send(Err(e));
                return;
            }
        };
        let mut task = cluster.task_of(&read, None).await;
        if let Until::TurnOf(Some(request)) = &until {
            // The message was delivered, but its session may not have logged it yet: the task
            // works on it all the same.
            let taken = read.log.turn_that_took(Some(request)).is_some();
            if !taken && !task.status.state.is_terminal() {
                task.status.state = TaskState::Working;
                task.status.message = None;
            }
        }
        let (id, context) = (task.id.to_string(), task.context_id.clone());
        if !send(Ok(StreamResponse::Task(task))) {
            return;
        }
        let deadline = tokio::time::Instant::now() + cluster.turn_timeout;
        let mut polls: u64 = 0;
        while !done(&read, &until) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
            polls += 1;
            let events = match step(&cluster, &mut read, polls.is_multiple_of(10)).await {
                Ok(events) => events,
                Err(e) => {
                    send(Err(e));
                    return;
                }
            };
            for event in &events {
                read.log.fold(std::slice::from_ref(event));
                // A reply belongs to the turn begun last.
                let turn = read.log.turns.last().map_or(0, |t| t.index);
                if let Some(update) = update_of(&id, &context, turn, event) {
                    if !send(Ok(update)) {
                        return;
                    }
                }
            }
            if matches!(
                read.record.state,
                SessionState::Disposed | SessionState::Settled
            ) {
                let ended = cluster.task_of(&read, Some(0)).await;
                send(Ok(final_update(&ended)));
                return;
            }
        }
    });
    rx.boxed()
}
