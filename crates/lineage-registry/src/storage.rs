//! Durable storage of one registry member in one redb file (G3).
//!
//! `<data_dir>/registry.redb` holds three tables:
//!
//! | table | key | value |
//! |---|---|---|
//! | `meta` | `&str` | `format`, `cluster`, `raft_id`, `vote`, `committed`, `last_purged`, `snapshot_seq` |
//! | `logs` | `u64` log index | JSON of `openraft::Entry<TypeConfig>` (payload: a [`crate::types::CommandBatch`]) |
//! | `snapshot` | `&str` | stores written before the snapshot file: `meta` (JSON `SnapshotMeta`), `data` (JSON `RegistryState`); read when there is no snapshot file, emptied once one is written |
//!
//! The last snapshot itself is the file `<data_dir>/snapshot` ([`crate::snapshot_file`]): in
//! redb, its write (hundreds of MB at a million sessions) held the one write transaction the
//! log's appends need.
//!
//! Every write that Raft acknowledges is committed with `Durability::Immediate` (fsync) before
//! openraft is told: the entries of one `append` are one transaction, so they cost one fsync.
//! Log transactions run on one writer thread, in the order openraft asks for them; `append`
//! returns once its entries are queued (and readable: they wait in an in-memory map until their
//! transaction committed) and reports the fsync through openraft's `LogFlushed` callback.
//! openraft 0.9 itself waits for that callback before its next command (`RaftCore::append_to_log`),
//! so a leader still sends new entries to its followers only after its own fsync (measured:
//! the append-entries leave ~0.1 ms after the leader's commit; a write is two fsyncs in a row,
//! the leader's then a follower's). `truncate` and `purge` wait for their turn on the thread and
//! for their commit.
//! (openraft 0.9 appends each `client_write` on its own and waits for it, so the leader's group
//! commit happens one level up: a log entry carries a batch of commands, see
//! [`crate::types::CommandBatch`].)
//!
//! The committed log id costs no I/O of its own: `save_committed` keeps it in memory and the next
//! log transaction (append, truncate, purge) writes it along. It is only an optimization (the
//! committed entries are replayed at start), an older value is still a committed value, and
//! writing it on its own would cost an fsync per commit: redb's `Durability::Eventual` fsyncs
//! too on Linux.
//!
//! The state machine lives in memory; it is persisted as snapshots, and on restart it is the
//! last snapshot plus the committed log entries replayed by openraft.
//!
//! Opening refuses a file that is not a redb database, or one that belongs to another cluster or
//! Raft id, with [`RegistryError::CorruptDataDir`] naming the path. Nothing is ever reset.

// openraft's trait methods fix the error type (`StorageError`, 224 bytes).
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, RwLock};

use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{
    AnyError, Entry, EntryPayload, LogState, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};

/// redb's page cache per registry member (redb's default is 1 GiB, which a long-running member
/// fills with pages of log entries long since purged: under a steady churn its RSS grew by
/// ~7 KB per session born and purged). 32 MiB holds far more than the log kept between
/// snapshots.
pub const REDB_CACHE_BYTES: usize = 32 * 1024 * 1024;

use crate::error::RegistryError;
use crate::raft_types::{LogId, RaftMember, TypeConfig};
use crate::state::RegistryState;
use crate::store_stats::StoreStats;
use crate::types::BatchResponse;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot");

/// The on-disk format this build writes and reads.
///
/// `/2`: log entries carry a [`crate::types::CommandBatch`], stored results carry `at_ms`.
/// A store of another format is refused (never converted or reset).
const FORMAT: &[u8] = b"lineage-registry/2";
/// The file name inside the data directory.
pub const DB_FILE: &str = "registry.redb";

type StoreResult<T> = Result<T, StorageError<u64>>;

fn io_err(
    kind: fn(AnyError) -> StorageIOError<u64>,
    e: impl std::fmt::Display,
) -> StorageError<u64> {
    StorageError::from(kind(AnyError::error(e.to_string())))
}
fn read_err(e: impl std::fmt::Display) -> StorageError<u64> {
    io_err(StorageIOError::read, e)
}
fn write_err(e: impl std::fmt::Display) -> StorageError<u64> {
    io_err(StorageIOError::write, e)
}

/// The in-memory state machine and what openraft needs to know about it.
#[derive(Debug, Default)]
pub(crate) struct SmData {
    pub(crate) state: RegistryState,
    pub(crate) last_applied: Option<LogId>,
    pub(crate) last_membership: StoredMembership<u64, RaftMember>,
}

/// Shared read access to the applied state (queries read it without going through Raft).
pub(crate) type SharedState = Arc<RwLock<SmData>>;

/// Entries handed to `append` whose transaction has not committed yet, by index.
type Pending = Arc<Mutex<BTreeMap<u64, Entry<TypeConfig>>>>;

/// A log transaction for the writer thread.
enum LogJob {
    Append {
        encoded: Vec<(u64, Vec<u8>)>,
        ids: Vec<LogId>,
        committed: Option<Vec<u8>>,
        callback: LogFlushed<TypeConfig>,
    },
    Truncate {
        log_id: LogId,
        committed: Option<Vec<u8>>,
        done: tokio::sync::oneshot::Sender<StoreResult<()>>,
    },
    Purge {
        log_id: LogId,
        committed: Option<Vec<u8>>,
        done: tokio::sync::oneshot::Sender<StoreResult<()>>,
    },
}

/// The writer thread: runs log transactions one after the other until every [`LogStore`] is
/// gone. It holds the database weakly, so closing the store still releases the file.
fn spawn_writer(db: &Arc<Database>, pending: Pending) -> std::io::Result<mpsc::Sender<LogJob>> {
    let (tx, rx) = mpsc::channel::<LogJob>();
    let db = Arc::downgrade(db);
    std::thread::Builder::new()
        .name("registry-log".into())
        .spawn(move || {
            // The database is held only while a transaction runs: dropped before anyone is
            // told, so a store closed right after its last append releases the file at once.
            let with_db = |f: &dyn Fn(&Database) -> StoreResult<()>| match db.upgrade() {
                Some(db) => f(&db),
                None => Err(write_err("the registry store is closed")),
            };
            for job in rx {
                match job {
                    LogJob::Append {
                        encoded,
                        ids,
                        committed,
                        callback,
                    } => {
                        let result =
                            with_db(&|db| write_entries(db, &encoded, committed.as_deref()));
                        if result.is_ok() {
                            // Durable now: readers find them in the database.
                            if let Ok(mut pending) = pending.lock() {
                                for id in &ids {
                                    if pending.get(&id.index).map(|e| e.log_id) == Some(*id) {
                                        pending.remove(&id.index);
                                    }
                                }
                            }
                        }
                        callback.log_io_completed(
                            result.map_err(|e| std::io::Error::other(e.to_string())),
                        );
                    }
                    LogJob::Truncate {
                        log_id,
                        committed,
                        done,
                    } => {
                        let result = with_db(&|db| truncate_from(db, log_id, committed.as_deref()));
                        let _ = done.send(result);
                    }
                    LogJob::Purge {
                        log_id,
                        committed,
                        done,
                    } => {
                        let result = with_db(&|db| purge_upto(db, log_id, committed.as_deref()));
                        let _ = done.send(result);
                    }
                }
            }
        })?;
    Ok(tx)
}

/// One transaction, one fsync for all the entries of one append.
fn write_entries(
    db: &Database,
    encoded: &[(u64, Vec<u8>)],
    committed: Option<&[u8]>,
) -> StoreResult<()> {
    let mut txn = db.begin_write().map_err(write_err)?;
    txn.set_durability(Durability::Immediate);
    {
        let mut table = txn.open_table(LOGS).map_err(write_err)?;
        for (index, bytes) in encoded {
            table.insert(*index, bytes.as_slice()).map_err(write_err)?;
        }
    }
    write_committed(&txn, committed)?;
    txn.commit().map_err(write_err)
}

/// Deletes the entries from `log_id` on.
fn truncate_from(db: &Database, log_id: LogId, committed: Option<&[u8]>) -> StoreResult<()> {
    let mut txn = db.begin_write().map_err(write_err)?;
    txn.set_durability(Durability::Immediate);
    {
        let mut table = txn.open_table(LOGS).map_err(write_err)?;
        table
            .retain_in::<u64, _>(log_id.index.., |_, _| false)
            .map_err(write_err)?;
    }
    write_committed(&txn, committed)?;
    txn.commit().map_err(write_err)
}

/// Deletes the entries up to `log_id` and records it as the last purged.
fn purge_upto(db: &Database, log_id: LogId, committed: Option<&[u8]>) -> StoreResult<()> {
    let bytes = serde_json::to_vec(&Some(log_id)).map_err(write_err)?;
    let mut txn = db.begin_write().map_err(write_err)?;
    txn.set_durability(Durability::Immediate);
    {
        let mut meta = txn.open_table(META).map_err(write_err)?;
        meta.insert("last_purged", bytes.as_slice())
            .map_err(write_err)?;
        let mut table = txn.open_table(LOGS).map_err(write_err)?;
        table
            .retain_in::<u64, _>(..=log_id.index, |_, _| false)
            .map_err(write_err)?;
    }
    write_committed(&txn, committed)?;
    txn.commit().map_err(write_err)
}

/// Opens (or creates) the store of one member; refuses foreign or corrupt stores.
pub fn open_store(
    data_dir: &Path,
    cluster: &str,
    raft_id: u64,
) -> Result<(LogStore, StateMachineStore), RegistryError> {
    let corrupt = |path: &Path, reason: String| RegistryError::CorruptDataDir {
        path: path.to_path_buf(),
        reason,
    };
    if data_dir.exists() && !data_dir.is_dir() {
        return Err(corrupt(data_dir, "it is not a directory".into()));
    }
    std::fs::create_dir_all(data_dir).map_err(|e| corrupt(data_dir, e.to_string()))?;
    let path = data_dir.join(DB_FILE);
    if path.exists() && !path.is_file() {
        return Err(corrupt(&path, "it is not a regular file".into()));
    }
    let snapshot = data_dir.join(crate::snapshot_file::SNAPSHOT_FILE);
    if !path.exists() && snapshot.exists() {
        return Err(corrupt(
            &snapshot,
            format!("it has no {DB_FILE} beside it (its log and vote are gone); to rejoin as a new member, remove the whole directory {}", data_dir.display()),
        ));
    }
    let db = redb::Builder::new()
        .set_cache_size(REDB_CACHE_BYTES)
        .create(&path)
        .map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => corrupt(
                &path,
                "it is already open (another registry member uses this data directory)".into(),
            ),
            other => corrupt(&path, format!("not a readable registry store ({other})")),
        })?;
    let db = Arc::new(db);
    check_identity(&db, &path, cluster, raft_id)?;
    let stats = Arc::new(StoreStats::default());
    let data = load_snapshot(&db, data_dir, &stats).map_err(|reason| corrupt(&path, reason))?;
    let shared: SharedState = Arc::new(RwLock::new(data));
    let pending: Pending = Arc::new(Mutex::new(BTreeMap::new()));
    let writer = spawn_writer(&db, pending.clone())
        .map_err(|e| corrupt(&path, format!("cannot start its writer thread: {e}")))?;
    Ok((
        LogStore {
            db: db.clone(),
            committed: Arc::new(Mutex::new(None)),
            pending,
            writer,
        },
        StateMachineStore {
            db,
            data: shared,
            path,
            dir: data_dir.to_path_buf(),
            stats,
        },
    ))
}

fn check_identity(
    db: &Database,
    path: &Path,
    cluster: &str,
    raft_id: u64,
) -> Result<(), RegistryError> {
    let corrupt = |reason: String| RegistryError::CorruptDataDir {
        path: path.to_path_buf(),
        reason,
    };
    let txn = db.begin_write().map_err(|e| corrupt(e.to_string()))?;
    {
        let mut meta = txn.open_table(META).map_err(|e| corrupt(e.to_string()))?;
        let logs = txn.open_table(LOGS).map_err(|e| corrupt(e.to_string()))?;
        txn.open_table(SNAPSHOT)
            .map_err(|e| corrupt(e.to_string()))?;
        let get = |key: &str| -> Result<Option<Vec<u8>>, RegistryError> {
            Ok(meta
                .get(key)
                .map_err(|e| corrupt(e.to_string()))?
                .map(|v| v.value().to_vec()))
        };
        let format = get("format")?;
        let stored_cluster = get("cluster")?;
        let stored_id = get("raft_id")?;
        match (format, stored_cluster, stored_id) {
            (None, None, None) => {
                let empty = logs.is_empty().map_err(|e| corrupt(e.to_string()))?;
                if !empty || get("vote")?.is_some() {
                    return Err(corrupt(
                        "the store has Raft data but no cluster identity".into(),
                    ));
                }
                drop(logs);
                meta.insert("format", FORMAT)
                    .map_err(|e| corrupt(e.to_string()))?;
                meta.insert("cluster", cluster.as_bytes())
                    .map_err(|e| corrupt(e.to_string()))?;
                meta.insert("raft_id", raft_id.to_string().as_bytes())
                    .map_err(|e| corrupt(e.to_string()))?;
            }
            (Some(format), Some(c), Some(id)) => {
                if format != FORMAT {
                    return Err(corrupt(format!(
                        "store format {:?} is not {:?}",
                        String::from_utf8_lossy(&format),
                        String::from_utf8_lossy(FORMAT)
                    )));
                }
                if c != cluster.as_bytes() {
                    return Err(corrupt(format!(
                        "it belongs to cluster {:?}, not {cluster:?}",
                        String::from_utf8_lossy(&c)
                    )));
                }
                if id != raft_id.to_string().as_bytes() {
                    return Err(corrupt(format!(
                        "it belongs to raft id {}, not {raft_id}",
                        String::from_utf8_lossy(&id)
                    )));
                }
            }
            _ => return Err(corrupt("the store identity is incomplete".into())),
        }
    }
    txn.commit().map_err(|e| corrupt(e.to_string()))?;
    Ok(())
}

fn load_snapshot(db: &Database, dir: &Path, stats: &StoreStats) -> Result<SmData, String> {
    let started = std::time::Instant::now();
    if let Some((meta, data)) = crate::snapshot_file::read(dir)? {
        let meta: SnapshotMeta<u64, RaftMember> = serde_json::from_slice(&meta)
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
            let meta: SnapshotMeta<u64, RaftMember> = serde_json::from_slice(meta.value())
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

/// Runs a blocking redb write off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> StoreResult<T> + Send + 'static,
) -> StoreResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| write_err(format!("storage task failed: {e}")))?
}

fn get_meta<T: serde::de::DeserializeOwned>(db: &Database, key: &str) -> StoreResult<Option<T>> {
    let txn = db.begin_read().map_err(read_err)?;
    let table = txn.open_table(META).map_err(read_err)?;
    match table.get(key).map_err(read_err)? {
        Some(v) => serde_json::from_slice(v.value())
            .map(Some)
            .map_err(read_err),
        None => Ok(None),
    }
}

fn put_meta<T: serde::Serialize>(
    db: &Database,
    key: &str,
    value: &T,
    durability: Durability,
) -> StoreResult<()> {
    let bytes = serde_json::to_vec(value).map_err(write_err)?;
    let mut txn = db.begin_write().map_err(write_err)?;
    txn.set_durability(durability);
    {
        let mut table = txn.open_table(META).map_err(write_err)?;
        table.insert(key, bytes.as_slice()).map_err(write_err)?;
    }
    txn.commit().map_err(write_err)
}

/// The Raft log and vote of one member (and its log reader: it is cheap to clone).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    /// The last committed log id openraft reported, not yet written: the next log transaction
    /// writes it along (see the module docs).
    committed: Arc<Mutex<Option<LogId>>>,
    /// Appended entries not committed yet (readable meanwhile).
    pending: Pending,
    /// The writer thread's queue.
    writer: mpsc::Sender<LogJob>,
}

impl LogStore {
    /// Queues a truncate or purge and waits for its commit.
    async fn run_job(
        &self,
        make: impl FnOnce(tokio::sync::oneshot::Sender<StoreResult<()>>) -> LogJob,
    ) -> StoreResult<()> {
        let (done, answer) = tokio::sync::oneshot::channel();
        self.writer
            .send(make(done))
            .map_err(|_| write_err("the registry log writer stopped"))?;
        answer
            .await
            .map_err(|_| write_err("the registry log writer stopped"))?
    }

    /// The committed log id to write along with the next log transaction, if one is pending.
    fn pending_committed(&self) -> StoreResult<Option<Vec<u8>>> {
        let committed = *self
            .committed
            .lock()
            .map_err(|_| write_err("committed id lock poisoned"))?;
        match committed {
            Some(c) => serde_json::to_vec(&Some(c)).map(Some).map_err(write_err),
            None => Ok(None),
        }
    }
}

/// Writes a pending committed log id inside a log transaction.
fn write_committed(txn: &redb::WriteTransaction, committed: Option<&[u8]>) -> StoreResult<()> {
    if let Some(bytes) = committed {
        let mut meta = txn.open_table(META).map_err(write_err)?;
        meta.insert("committed", bytes).map_err(write_err)?;
    }
    Ok(())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry<TypeConfig>>> {
        let bounds: (Bound<u64>, Bound<u64>) =
            (range.start_bound().cloned(), range.end_bound().cloned());
        // Pending first, then the database: an entry leaves the pending map only after its
        // transaction committed, so it is in one or the other.
        let pending: Vec<Entry<TypeConfig>> = self
            .pending
            .lock()
            .map_err(|_| read_err("pending entries lock poisoned"))?
            .range(bounds)
            .map(|(_, e)| e.clone())
            .collect();
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let mut out: BTreeMap<u64, Entry<TypeConfig>> = BTreeMap::new();
        for item in table.range::<u64>(bounds).map_err(read_err)? {
            let (k, v) = item.map_err(read_err)?;
            let entry: Entry<TypeConfig> = serde_json::from_slice(v.value()).map_err(read_err)?;
            out.insert(k.value(), entry);
        }
        for entry in pending {
            out.insert(entry.log_id.index, entry);
        }
        Ok(out.into_values().collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StoreResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId> = get_meta(&self.db, "last_purged")?;
        let last_pending = self
            .pending
            .lock()
            .map_err(|_| read_err("pending entries lock poisoned"))?
            .values()
            .next_back()
            .map(|e| e.log_id);
        if let Some(last) = last_pending {
            return Ok(LogState {
                last_purged_log_id: last_purged,
                last_log_id: Some(last),
            });
        }
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let last = match table.last().map_err(read_err)? {
            Some((_, v)) => {
                let entry: Entry<TypeConfig> =
                    serde_json::from_slice(v.value()).map_err(read_err)?;
                Some(entry.log_id)
            }
            None => last_purged,
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> StoreResult<()> {
        let db = self.db.clone();
        let vote = *vote;
        blocking(move || put_meta(&db, "vote", &vote, Durability::Immediate)).await
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote<u64>>> {
        get_meta(&self.db, "vote")
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> StoreResult<()> {
        // No I/O here: the next log transaction writes it (see the module docs).
        let mut pending = self
            .committed
            .lock()
            .map_err(|_| write_err("committed id lock poisoned"))?;
        if committed.is_some() {
            *pending = committed;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> StoreResult<Option<LogId>> {
        let pending = *self
            .committed
            .lock()
            .map_err(|_| read_err("committed id lock poisoned"))?;
        match pending {
            Some(c) => Ok(Some(c)),
            None => Ok(get_meta::<Option<LogId>>(&self.db, "committed")?.flatten()),
        }
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut encoded = Vec::new();
        let mut ids = Vec::new();
        let mut staged = Vec::new();
        for entry in entries {
            let bytes = serde_json::to_vec(&entry).map_err(write_err)?;
            encoded.push((entry.log_id.index, bytes));
            ids.push(entry.log_id);
            staged.push(entry);
        }
        let committed = self.pending_committed()?;
        {
            let mut pending = self
                .pending
                .lock()
                .map_err(|_| write_err("pending entries lock poisoned"))?;
            for entry in staged {
                pending.insert(entry.log_id.index, entry);
            }
        }
        // Queued, in order; the callback tells openraft when it is durable.
        self.writer
            .send(LogJob::Append {
                encoded,
                ids,
                committed,
                callback,
            })
            .map_err(|_| write_err("the registry log writer stopped"))
    }

    async fn truncate(&mut self, log_id: LogId) -> StoreResult<()> {
        let committed = self.pending_committed()?;
        if let Ok(mut pending) = self.pending.lock() {
            pending.retain(|index, _| *index < log_id.index);
        }
        self.run_job(|done| LogJob::Truncate {
            log_id,
            committed,
            done,
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> StoreResult<()> {
        let committed = self.pending_committed()?;
        self.run_job(|done| LogJob::Purge {
            log_id,
            committed,
            done,
        })
        .await?;
        if let Ok(mut pending) = self.pending.lock() {
            pending.retain(|index, _| *index > log_id.index);
        }
        Ok(())
    }
}

/// The state machine of one member: the in-memory [`RegistryState`] plus its snapshots on disk.
#[derive(Clone)]
pub struct StateMachineStore {
    db: Arc<Database>,
    data: SharedState,
    path: PathBuf,
    dir: PathBuf,
    stats: Arc<StoreStats>,
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
        meta: &SnapshotMeta<u64, RaftMember>,
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
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<TypeConfig>> {
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
        let seq: u64 = get_meta::<u64>(&db, "snapshot_seq")?.unwrap_or(0) + 1;
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}-{seq}", l.leader_id, l.index),
            None => format!("none-{seq}"),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership,
            snapshot_id,
        };
        let (meta2, dir) = (meta.clone(), self.dir.clone());
        let shared = Arc::new(bytes);
        let written = shared.clone();
        blocking(move || {
            put_meta(&db, "snapshot_seq", &seq, Durability::Immediate)?;
            Self::persist_snapshot(&db, &dir, &meta2, &written)
        })
        .await?;
        // The blocking task dropped its handle: no copy of a snapshot that may be hundreds of MB.
        let bytes = Arc::try_unwrap(shared).unwrap_or_else(|still| (*still).clone());
        self.stats.built(started.elapsed(), bytes.len() as u64);
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(
        &mut self,
    ) -> StoreResult<(Option<LogId>, StoredMembership<u64, RaftMember>)> {
        let data = self
            .data
            .read()
            .map_err(|_| read_err("state machine lock poisoned"))?;
        Ok((data.last_applied, data.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StoreResult<Vec<BatchResponse>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut data = self
            .data
            .write()
            .map_err(|_| write_err("state machine lock poisoned"))?;
        let mut out = Vec::new();
        for entry in entries {
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
            out.push(response);
        }
        self.stats.keeps_results(data.state.request_count());
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StoreResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, RaftMember>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StoreResult<()> {
        let started = std::time::Instant::now();
        let bytes = snapshot.into_inner();
        let size = bytes.len() as u64;
        let (db, dir, meta2) = (self.db.clone(), self.dir.clone(), meta.clone());
        let signature = meta.signature();
        // Decoding (and later dropping) a large state takes seconds: on blocking threads.
        let state = blocking(move || {
            let state = RegistryState::decode_snapshot(&bytes).map_err(|e| {
                StorageError::from(StorageIOError::read_snapshot(
                    Some(signature),
                    AnyError::error(e),
                ))
            })?;
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

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot<TypeConfig>>> {
        let dir = self.dir.clone();
        let file = blocking(move || crate::snapshot_file::read(&dir).map_err(read_err)).await?;
        if let Some((meta, data)) = file {
            let meta: SnapshotMeta<u64, RaftMember> =
                serde_json::from_slice(&meta).map_err(read_err)?;
            return Ok(Some(Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            }));
        }
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(SNAPSHOT).map_err(read_err)?;
        let meta = table.get("meta").map_err(read_err)?;
        let data = table.get("data").map_err(read_err)?;
        match (meta, data) {
            (Some(meta), Some(data)) => {
                let meta: SnapshotMeta<u64, RaftMember> =
                    serde_json::from_slice(meta.value()).map_err(read_err)?;
                Ok(Some(Snapshot {
                    meta,
                    snapshot: Box::new(Cursor::new(data.value().to_vec())),
                }))
            }
            _ => Ok(None),
        }
    }
}
