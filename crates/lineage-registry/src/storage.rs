//! Durable storage of one registry member in one redb file (G3).
//!
//! `<data_dir>/registry.redb` holds three tables:
//!
//! | table | key | value |
//! |---|---|---|
//! | `meta` | `&str` | `format`, `cluster`, `raft_id`, `vote`, `committed`, `last_purged` (and `snapshot_seq`, which the openraft 0.9 build counted snapshots in: no longer written) |
//! | `logs` | `u64` log index | JSON of `openraft::Entry<TypeConfig>` (payload: a [`crate::types::CommandBatch`]) |
//! | `snapshot` | `&str` | stores written before the snapshot file: `meta` (JSON `SnapshotMeta`), `data` (JSON `RegistryState`); read when there is no snapshot file, emptied once one is written |
//!
//! The last snapshot itself is the file `<data_dir>/snapshot` ([`crate::snapshot_file`]): in
//! redb, its write (hundreds of MB at a million sessions) held the one write transaction the
//! log's appends need.
//!
//! Every write that Raft acknowledges is committed with `Durability::Immediate` (fsync) before
//! openraft is told: the entries of one `append` are one transaction, so they cost one fsync.
//! Log transactions (append, truncate, purge, and the vote) run on one writer thread, in the
//! order openraft asks for them; `append` returns once its entries are queued (and readable:
//! they wait in an in-memory map until their transaction committed) and reports the fsync
//! through openraft's `IOFlushed` callback. openraft 0.10 sends the entries to the followers as
//! soon as `append` returns (`broadcast_submitted_on_append`), while the leader's own fsync
//! runs. The vote goes through the same thread, so a saved vote means every append queued
//! before it is durable (openraft issue #2118: a member that takes office counts its whole log
//! as flushed). `truncate_after`, `purge` and `save_vote` wait for their turn and their commit.
//! (A log entry carries a batch of commands, see [`crate::types::CommandBatch`].)
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
//! | file | what |
//! |---|---|
//! | `storage.rs` | opening a member's store: the identity check, the meta table, shared helpers |
//! | `storage/log.rs` | [`LogStore`]: the log and the vote, the writer thread |
//! | `storage/state_machine.rs` | [`StateMachineStore`]: apply, snapshot build, install, load |
//!
//! Opening refuses a file that is not a redb database, or one that belongs to another cluster or
//! Raft id, with [`RegistryError::CorruptDataDir`] naming the path. Nothing is ever reset.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};

/// redb's page cache per registry member (redb's default is 1 GiB, which a long-running member
/// fills with pages of log entries long since purged: under a steady churn its RSS grew by
/// ~7 KB per session born and purged). 32 MiB holds far more than the log kept between
/// snapshots.
pub const REDB_CACHE_BYTES: usize = 32 * 1024 * 1024;

use crate::error::RegistryError;
use crate::raft_types::{LogId, StoredMembership};
use crate::state::RegistryState;
use crate::store_stats::StoreStats;

mod log;
mod state_machine;

pub use log::LogStore;
use log::{spawn_writer, Pending};
use state_machine::load_snapshot;
pub use state_machine::StateMachineStore;

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

/// openraft 0.10's storage traits answer `std::io::Error`.
type StoreResult<T> = Result<T, std::io::Error>;

fn read_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("reading the registry store: {e}"))
}
fn write_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("writing the registry store: {e}"))
}

/// The in-memory state machine and what openraft needs to know about it.
#[derive(Debug, Default)]
pub(crate) struct SmData {
    pub(crate) state: RegistryState,
    pub(crate) last_applied: Option<LogId>,
    pub(crate) last_membership: StoredMembership,
}

/// Shared read access to the applied state (queries read it without going through Raft).
pub(crate) type SharedState = Arc<RwLock<SmData>>;

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
