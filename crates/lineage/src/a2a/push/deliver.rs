//! The delivery loop every gateway runs: read each task with push configs, and send each
//! config the transitions it has not been sent, in order, each once (see the module docs of
//! [`super`] for the claim, the POST and the record).

use std::sync::Arc;
use std::time::Duration;

use a2a_server::HttpPushSender;
use lineage_core::ids::SessionId;
use lineage_core::log::SessionEvent;
use lineage_registry::SessionRecord;
use tokio_util::sync::CancellationToken;

use super::store::{Mark, PushEntry, PushStore};
use super::{notification, notification_id, pending};
use crate::a2a::handler::{state_name, Cluster};
use crate::client::now_ms;

/// How often the loop reads the tasks again.
pub const EVERY: Duration = Duration::from_millis(250);
/// How long a claim holds before another gateway may send the same transition.
pub const CLAIM_MS: u64 = 30_000;

/// Runs until `stop`.
pub(crate) async fn run(
    cluster: Arc<Cluster>,
    store: PushStore,
    sender: HttpPushSender,
    stop: CancellationToken,
) {
    loop {
        if let Err(e) = pass(&cluster, &store, &sender).await {
            tracing::warn!(error = %e, "a2a push: one pass failed; trying again");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
    }
}

/// One pass over every config.
async fn pass(
    cluster: &Cluster,
    store: &PushStore,
    sender: &HttpPushSender,
) -> Result<(), a2a::A2AError> {
    let mut keys = store.keys().await?;
    keys.sort();
    let mut read: Option<(String, Option<TaskNow>)> = None;
    for (task, id) in keys {
        if read.as_ref().is_none_or(|(t, _)| *t != task) {
            read = Some((task.clone(), read_task(cluster, &task).await));
        }
        // A task the registry no longer has (purged) has nothing more to send.
        let Some((_, Some((record, events)))) = &read else {
            continue;
        };
        let Some((entry, revision)) = store.entry(&task, &id).await? else {
            continue;
        };
        let root = record.header.root_session().to_string();
        let todo = pending(
            &task,
            &root,
            events,
            &entry.delivered,
            record.state,
            record.stop_reason,
        );
        send_in_order(store, sender, &task, &root, entry, revision, todo).await?;
    }
    Ok(())
}

/// A task's record and whole log.
type TaskNow = (SessionRecord, Vec<SessionEvent>);

/// A task's record and whole log; `None` when either cannot be read now.
async fn read_task(cluster: &Cluster, task: &str) -> Option<TaskNow> {
    let session = SessionId::parse(task).ok()?;
    let record = cluster.record(&session).await.ok()?;
    let (events, _) = cluster.logs.read(&session).await.ok()?;
    Some((record, events))
}

/// Sends `todo` to `entry`'s webhook, one after another: claim, POST, record. Stops at the
/// first transition another gateway holds or the webhook refuses (the next pass tries again).
async fn send_in_order(
    store: &PushStore,
    sender: &HttpPushSender,
    task: &str,
    root: &str,
    mut entry: PushEntry,
    mut revision: u64,
    todo: Vec<super::Transition>,
) -> Result<(), a2a::A2AError> {
    for t in todo {
        let mark = Mark {
            seq: t.seq,
            state: state_name(&t.state),
        };
        let now = now_ms();
        if entry.claim.as_ref().is_some_and(|(_, until)| *until > now) {
            return Ok(()); // another gateway is sending it (or this one, in a pass that failed)
        }
        entry.claim = Some((mark.clone(), now + CLAIM_MS));
        let Some(claimed) = store.update(&entry, revision).await? else {
            return Ok(()); // another gateway wrote first
        };
        revision = claimed;
        if let Err(e) = sender
            .send_push(&entry.config, notification(task, root, &t))
            .await
        {
            tracing::warn!(
                task,
                config = entry.config.id.as_deref().unwrap_or(""),
                notification = %notification_id(task, &t),
                error = %e.message,
                "a2a push: the webhook did not take it; it is sent again when the claim lapses"
            );
            return Ok(());
        }
        entry.delivered = mark;
        entry.claim = None;
        let Some(recorded) = store.update(&entry, revision).await? else {
            return Ok(());
        };
        revision = recorded;
    }
    Ok(())
}
