//! Group commit of registry writes: [`batch_writes`] proposes the queued commands of one member
//! as one log entry ([`crate::types::CommandBatch`]) whenever fewer than
//! [`crate::node::MAX_BATCHES_IN_FLIGHT`] of its entries are on their way, sized by
//! [`WriteLimits`]; [`trigger_snapshots`] asks Raft for a snapshot when one is due.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use crate::node::{MAX_BATCHES_IN_FLIGHT, MAX_BATCH_COMMANDS};
use crate::raft_types::RegistryRaft;
use crate::storage::SharedState;
use crate::types::{Command, CommandBatch};
use crate::wire::WriteReply;

/// Size limits derived from the NATS server's `max_payload`, so that an entry always fits in
/// one append-entries request.
pub(crate) struct WriteLimits {
    /// The largest command accepted (its JSON).
    pub(crate) command_bytes: usize,
    /// A batch stops growing past this many bytes of command JSON.
    pub(crate) batch_bytes: usize,
}

impl WriteLimits {
    pub(crate) fn for_max_payload(max_payload: usize) -> Self {
        // 0 means unknown: assume the NATS default of 1 MiB.
        let max_payload = if max_payload == 0 {
            1024 * 1024
        } else {
            max_payload
        };
        Self {
            command_bytes: max_payload / 2,
            batch_bytes: max_payload / 4,
        }
    }
}

/// A decoded command waiting for its batch.
pub(crate) struct PendingWrite {
    pub(crate) cmd: Command,
    /// Its JSON size as received.
    pub(crate) bytes: usize,
    pub(crate) reply: oneshot::Sender<WriteReply>,
}

/// How often [`trigger_snapshots`] looks.
pub(crate) const SNAPSHOT_CHECK: Duration = Duration::from_millis(500);

/// Asks Raft for a snapshot whenever [`crate::snapshot_policy::snapshot_due`] says so, until
/// `stop` fires. (openraft skips the request while a build is under way.)
pub(crate) async fn trigger_snapshots(
    raft: RegistryRaft,
    state: SharedState,
    stats: Arc<crate::store_stats::StoreStats>,
    min_commands: u64,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(SNAPSHOT_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tick.tick() => {}
        }
        let Ok(records) = state.read().map(|d| d.state.session_count() as u64) else {
            break;
        };
        let since = stats.figures().commands_since_snapshot;
        if crate::snapshot_policy::snapshot_due(since, records, min_commands) {
            if let Err(e) = raft.trigger().snapshot().await {
                tracing::debug!(error = %e, "snapshot trigger refused");
                break;
            }
        }
    }
}

/// Proposes queued commands in batches, at most [`MAX_BATCHES_IN_FLIGHT`] at once, until `stop`
/// fires or every sender is gone.
pub(crate) async fn batch_writes(
    raft: RegistryRaft,
    raft_id: u64,
    mut queue: mpsc::Receiver<PendingWrite>,
    batch_bytes: usize,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_BATCHES_IN_FLIGHT));
    let mut carried: Option<PendingWrite> = None;
    loop {
        let slot = tokio::select! {
            _ = stop.changed() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let first = match carried.take() {
            Some(first) => first,
            None => tokio::select! {
                _ = stop.changed() => break,
                first = queue.recv() => match first {
                    Some(first) => first,
                    None => break,
                },
            },
        };
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_COMMANDS {
            match queue.try_recv() {
                Ok(next) if bytes.saturating_add(next.bytes) > batch_bytes => {
                    carried = Some(next);
                    break;
                }
                Ok(next) => {
                    bytes = bytes.saturating_add(next.bytes);
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        let raft = raft.clone();
        tokio::spawn(async move {
            let (commands, replies): (Vec<Command>, Vec<oneshot::Sender<WriteReply>>) =
                batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
            let result = raft.client_write(CommandBatch { commands }).await;
            drop(slot);
            match result {
                Ok(resp) => {
                    let mut responses = resp.data.responses.into_iter();
                    for reply in replies {
                        let answer = match responses.next() {
                            Some(response) => WriteReply::Done { response },
                            None => WriteReply::Unavailable {
                                reason: "the entry was applied without a response for this command"
                                    .into(),
                            },
                        };
                        let _ = reply.send(answer);
                    }
                }
                Err(e) => {
                    let answer = match e {
                        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                            WriteReply::NotLeader {
                                leader: f.leader_id.filter(|l| *l != raft_id),
                            }
                        }
                        other => WriteReply::Unavailable {
                            reason: other.to_string(),
                        },
                    };
                    for reply in replies {
                        let _ = reply.send(answer.clone());
                    }
                }
            }
        });
    }
    // Whatever is still queued is dropped: those callers answer `Unavailable` and the clients
    // retry elsewhere.
}

/// Serves client writes and reads for one member.
/// The span of one client request served here, when the request carries a `traceparent`: a
/// child of the caller's context ([`lineage_bus::trace::open_span`]), named `registry.write` or
/// `registry.read`. (Raft replication serves many writes at once and is not traced.) Untraced requests, such as
/// lease heartbeats, get no span.
pub(crate) fn request_span(
    is_write: bool,
    raft_id: u64,
    parent: Option<lineage_bus::trace::TraceContext>,
) -> tracing::Span {
    let Some(parent) = parent else {
        return tracing::Span::none();
    };
    let span = if is_write {
        tracing::info_span!("registry.write", raft_id, trace_id = %parent.trace_id_hex())
    } else {
        tracing::info_span!("registry.read", raft_id, trace_id = %parent.trace_id_hex())
    };
    lineage_bus::trace::open_span(&span, Some(parent));
    span
}
