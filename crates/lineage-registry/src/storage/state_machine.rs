//! The state machine of one member ([`StateMachineStore`]): the in-memory
//! [`RegistryState`], applied from the log, snapshotted to the snapshot file and loaded from
//! it at open (see [`super`]).

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use redb::{Database, Durability, ReadableTableMetadata};

use crate::raft_types::{
    LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig,
};
use crate::state::RegistryState;
use crate::store_stats::StoreStats;
use crate::types::BatchResponse;

use super::{blocking, read_err, write_err, SharedState, SmData, StoreResult, SNAPSHOT};

pub(super) fn load_snapshot(
    db: &Database,
    dir: &Path,
    stats: &StoreStats,
) -> Result<SmData, String> {
    let started = std::time::Instant::now();
    if let Some((meta, data)) = crate::snapshot_file::read(dir)? {
        let meta: SnapshotMeta = serde_json::from_slice(&meta)
            .map_err(|e| format!("snapshot meta is unreadable: {e}"))?;
        let state = RegistryState::decode_snapshot(&data)
            .map_err(|e| format!("snapshot data is unreadable: {e}"))?;
        stats.loaded(started.elapsed(), data.len() as u64);
        stats.keeps_results(state.request_count());
        return Ok(SmData {
            state,
            last_applied: meta.last_log_id,
            last_membership: meta.last_membership,
        });
    }
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let table = txn.open_table(SNAPSHOT).map_err(|e| e.to_string())?;
    let meta = table.get("meta").map_err(|e| e.to_string())?;
    let data = table.get("data").map_err(|e| e.to_string())?;
    match (meta, data) {
        (Some(meta), Some(data)) => {
            let meta: SnapshotMeta = serde_json::from_slice(meta.value())
                .map_err(|e| format!("snapshot meta is unreadable: {e}"))?;
            let state = RegistryState::decode_snapshot(data.value())
                .map_err(|e| format!("snapshot data is unreadable: {e}"))?;
            stats.loaded(started.elapsed(), data.value().len() as u64);
            stats.keeps_results(state.request_count());
            Ok(SmData {
                state,
                last_applied: meta.last_log_id,
                last_membership: meta.last_membership,
            })
        }
        (None, None) => Ok(SmData::default()),
        _ => Err("snapshot is half written".into()),
    }
}

/// The state machine of one member: the in-memory [`RegistryState`] plus its snapshots on disk.
#[derive(Clone)]
pub struct StateMachineStore {
    pub(super) db: Arc<Database>,
    pub(super) data: SharedState,
    pub(super) path: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) stats: Arc<StoreStats>,
}

impl StateMachineStore {
    /// What this store has spent on loads, snapshot builds and installs.
    pub(crate) fn stats(&self) -> Arc<StoreStats> {
        self.stats.clone()
    }

    pub(crate) fn shared(&self) -> SharedState {
        self.data.clone()
    }

    /// A handle on the database, so the owner can close it last (releasing the file lock).
    pub(crate) fn db_handle(&self) -> Arc<Database> {
        self.db.clone()
    }

    /// The path of the redb file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the snapshot file; the first time, empties the redb table older stores kept
    /// their snapshot in.
    fn persist_snapshot(
        db: &Database,
        dir: &Path,
        meta: &SnapshotMeta,
        data: &[u8],
    ) -> StoreResult<()> {
        let meta_bytes = serde_json::to_vec(meta).map_err(write_err)?;
        crate::snapshot_file::write(dir, &meta_bytes, data).map_err(write_err)?;
        let old = {
            let txn = db.begin_read().map_err(read_err)?;
            let table = txn.open_table(SNAPSHOT).map_err(read_err)?;
            table.len().map_err(read_err)?
        };
        if old > 0 {
            let mut txn = db.begin_write().map_err(write_err)?;
            txn.set_durability(Durability::Immediate);
            {
                let mut table = txn.open_table(SNAPSHOT).map_err(write_err)?;
                table.remove("meta").map_err(write_err)?;
                table.remove("data").map_err(write_err)?;
            }
            txn.commit().map_err(write_err)?;
        }
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> StoreResult<Snapshot> {
        let started = std::time::Instant::now();
        // Encoding a large state takes seconds of CPU: on a blocking thread, not on one of
        // the runtime's workers (which Raft's heartbeats and the NATS connection share).
        let (shared, stats) = (self.data.clone(), self.stats.clone());
        let encode = move || {
            let data = shared
                .read()
                .map_err(|_| read_err("state machine lock poisoned"))?;
            // Applies wait for the read lock: what they add after it is the next snapshot's.
            stats.captured();
            Ok((
                data.state.encode_snapshot().map_err(read_err)?,
                data.last_applied,
                data.last_membership.clone(),
            ))
        };
        let (bytes, last_applied, last_membership) = blocking(encode).await?;
        let db = self.db.clone();
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership,
        };
        let (meta2, dir) = (meta.clone(), self.dir.clone());
        let shared = Arc::new(bytes);
        let written = shared.clone();
        blocking(move || Self::persist_snapshot(&db, &dir, &meta2, &written)).await?;
        // The blocking task dropped its handle: no copy of a snapshot that may be hundreds of MB.
        let bytes = Arc::try_unwrap(shared).unwrap_or_else(|still| (*still).clone());
        self.stats.built(started.elapsed(), bytes.len() as u64);
        Ok(Snapshot {
            meta,
            snapshot: Cursor::new(bytes),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(&mut self) -> StoreResult<(Option<LogId>, StoredMembership)> {
        let data = self
            .data
            .read()
            .map_err(|_| read_err("state machine lock poisoned"))?;
        Ok((data.last_applied, data.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, entries: Strm) -> StoreResult<()>
    where
        Strm: Stream<Item = StoreResult<EntryResponder<TypeConfig>>> + Unpin + OptionalSend,
    {
        // The entries openraft hands over at once, applied under one lock; each response is
        // sent as soon as its entry is applied.
        let entries: Vec<EntryResponder<TypeConfig>> = entries.try_collect().await?;
        let mut data = self
            .data
            .write()
            .map_err(|_| write_err("state machine lock poisoned"))?;
        for (entry, responder) in entries {
            data.last_applied = Some(entry.log_id);
            let response = match entry.payload {
                EntryPayload::Blank => BatchResponse::default(),
                EntryPayload::Normal(batch) => {
                    self.stats.applied(batch.commands.len() as u64);
                    BatchResponse {
                        responses: batch
                            .commands
                            .iter()
                            .map(|cmd| data.state.apply(cmd))
                            .collect(),
                    }
                }
                EntryPayload::Membership(m) => {
                    data.last_membership = StoredMembership::new(Some(entry.log_id), m);
                    BatchResponse::default()
                }
            };
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        self.stats.keeps_results(data.state.request_count());
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> StoreResult<()> {
        let started = std::time::Instant::now();
        let bytes = snapshot.into_inner();
        let size = bytes.len() as u64;
        let (db, dir, meta2) = (self.db.clone(), self.dir.clone(), meta.clone());
        // Decoding (and later dropping) a large state takes seconds: on blocking threads.
        let state = blocking(move || {
            let state = RegistryState::decode_snapshot(&bytes)
                .map_err(|e| read_err(format!("the snapshot received is unreadable: {e}")))?;
            Self::persist_snapshot(&db, &dir, &meta2, &bytes)?;
            Ok(state)
        })
        .await?;
        let mut data = self
            .data
            .write()
            .map_err(|_| write_err("state machine lock poisoned"))?;
        self.stats.keeps_results(state.request_count());
        let old = std::mem::replace(&mut data.state, state);
        tokio::task::spawn_blocking(move || drop(old));
        data.last_applied = meta.last_log_id;
        data.last_membership = meta.last_membership.clone();
        drop(data);
        self.stats.installed(started.elapsed(), size);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot>> {
        let dir = self.dir.clone();
        let file = blocking(move || crate::snapshot_file::read(&dir).map_err(read_err)).await?;
        if let Some((meta, data)) = file {
            let meta: SnapshotMeta = serde_json::from_slice(&meta).map_err(read_err)?;
            return Ok(Some(Snapshot {
                meta,
                snapshot: Cursor::new(data),
            }));
        }
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(SNAPSHOT).map_err(read_err)?;
        let meta = table.get("meta").map_err(read_err)?;
        let data = table.get("data").map_err(read_err)?;
        match (meta, data) {
            (Some(meta), Some(data)) => {
                let meta: SnapshotMeta = serde_json::from_slice(meta.value()).map_err(read_err)?;
                Ok(Some(Snapshot {
                    meta,
                    snapshot: Cursor::new(data.value().to_vec()),
                }))
            }
            _ => Ok(None),
        }
    }
}
