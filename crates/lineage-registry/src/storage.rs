//! Durable storage of one registry member (G3): the Raft log in a write-ahead log, the rest in
//! one redb file.
//!
//! `<data_dir>/raft-log/` ([`LOG_DIR`]) is the Raft log and vote: a write-ahead log of the
//! `raft-log` crate (by openraft's author), in chunk files of at most 16 MiB. Every record
//! (an entry, the vote, the committed id, a truncate, a purge) is appended in the order openraft
//! asks; `append` returns once its entries are in the log's buffer (readable at once) and asks
//! the log's flush thread for one write and one `fdatasync`, which reports through openraft's
//! `IOFlushed` callback. openraft 0.10 sends the entries to the followers as soon as `append`
//! returns (`broadcast_submitted_on_append`), while the leader's own fsync runs. A flush syncs
//! everything before it, so a saved vote means every append queued before it is durable
//! (openraft issue #2118: a member that takes office counts its whole log as flushed).
//! `truncate_after`, `purge` and `save_vote` wait for their flush. The committed id costs no
//! flush of its own: its record goes to disk with the next one (it is only an optimization:
//! the committed entries are replayed at start, and an older value is still a committed value).
//! A purge is a record; whole chunks below it are deleted after the flush that follows.
//!
//! `<data_dir>/registry.redb` holds three tables:
//!
//! | table | key | value |
//! |---|---|---|
//! | `meta` | `&str` | `format` (`lineage-registry/3`), `cluster`, `raft_id`, `log_opened` (present once the write-ahead log was opened and made its files) (and, in stores of format `/2`, `vote`, `committed`, `last_purged`; `snapshot_seq`, which the openraft 0.9 build counted snapshots in, is no longer written) |
//! | `logs` | `u64` log index | empty: where stores of format `/2` kept the log (JSON of `openraft::Entry<TypeConfig>`) |
//! | `snapshot` | `&str` | stores written before the snapshot file: `meta` (JSON `SnapshotMeta`), `data` (JSON `RegistryState`); read when there is no snapshot file, emptied once one is written |
//!
//! A store of format `/2` (the log in redb) has its log moved out once, when it is opened
//! ([`migrate`]); an older build refuses a `/3` store by its format.
//!
//! The last snapshot itself is the file `<data_dir>/snapshot` ([`crate::snapshot_file`]): in
//! redb, its write (hundreds of MB at a million sessions) held the one write transaction the
//! log's appends needed.
//!
//! The state machine lives in memory; it is persisted as snapshots, and on restart it is the
//! last snapshot plus the committed log entries replayed by openraft. (A log entry carries a
//! batch of commands, see [`crate::types::CommandBatch`].)
//!
//! | file | what |
//! |---|---|
//! | `storage.rs` | opening a member's store: the identity check, the meta table, shared helpers |
//! | `storage/log.rs` | [`LogStore`]: the log and the vote in the write-ahead log |
//! | `storage/migrate.rs` | moving the log of a `/2` store out of redb |
//! | `storage/state_machine.rs` | [`StateMachineStore`]: apply, snapshot build, install, load |
//!
//! Opening refuses a file that is not a redb database, one that belongs to another cluster or
//! Raft id, or a `/3` store whose log directory is gone or emptied, with
//! [`RegistryError::CorruptDataDir`] naming the path. Nothing is ever reset.

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
mod migrate;
mod state_machine;

use log::open_wal;
pub(crate) use log::Wal;
pub use log::{LogStore, LOG_DIR};
use state_machine::load_snapshot;
pub use state_machine::StateMachineStore;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot");

/// The on-disk format this build writes and reads.
///
/// `/3`: the Raft log and vote are in the write-ahead log `<data_dir>/raft-log/`
/// ([`log::LOG_DIR`]), not in redb. A build that writes `/2` refuses a `/3` store, so an
/// upgraded member cannot be started by an older binary that would find no vote.
const FORMAT: &[u8] = b"lineage-registry/3";

/// The format before issue 35's log: log entries (carrying a [`crate::types::CommandBatch`])
/// and the vote in the redb file. Opening one moves its log out ([`migrate`]); any other format
/// is refused (never converted or reset).
const FORMAT_LOG_IN_REDB: &[u8] = b"lineage-registry/2";
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
    let log_dir = data_dir.join(LOG_DIR);
    let log_has_files = std::fs::read_dir(&log_dir).is_ok_and(|mut files| files.next().is_some());
    if !path.exists() {
        if log_has_files {
            return Err(corrupt(
                &log_dir,
                format!("it has no {DB_FILE} beside it (the store's cluster and Raft id are gone); to rejoin as a new member, remove the whole directory {}", data_dir.display()),
            ));
        }
        // A new store: its log directory first, so a start cut short before the log opened
        // leaves a store that opens, not one whose log looks gone.
        std::fs::create_dir_all(&log_dir).map_err(|e| corrupt(&log_dir, e.to_string()))?;
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
    let format = check_identity(&db, &path, cluster, raft_id)?;
    let log_opened = meta_present(&db, LOG_OPENED).map_err(|e| corrupt(&path, e.to_string()))?;
    let wal = match format {
        StoreFormat::New => open_wal(&log_dir)
            .map_err(|e| corrupt(&log_dir, format!("cannot create the registry log ({e})")))?,
        StoreFormat::Current => {
            if !log_dir.is_dir() {
                return Err(corrupt(
                    &log_dir,
                    format!("it is missing though {DB_FILE} says the log is there (its log and vote are gone); to rejoin as a new member, remove the whole directory {}", data_dir.display()),
                ));
            }
            // Emptied (its chunk files deleted), it would open as an empty log and the member
            // would forget its vote. (A store whose first open stopped before its log made its
            // files has no mark yet, and opens.)
            if log_opened && !log_has_files {
                return Err(corrupt(
                    &log_dir,
                    format!("it is empty though {DB_FILE} says the log was written there (its log and vote are gone); to rejoin as a new member, remove the whole directory {}", data_dir.display()),
                ));
            }
            open_wal(&log_dir)
                .map_err(|e| corrupt(&log_dir, format!("not a readable registry log ({e})")))?
        }
        StoreFormat::LogInRedb => migrate::log_out_of_redb(&db, &path, &log_dir)?,
    };
    if !log_opened {
        // The log has its files now (the write-ahead log makes its first chunk on open).
        mark_meta(&db, LOG_OPENED).map_err(|e| corrupt(&path, e.to_string()))?;
    }
    let stats = Arc::new(StoreStats::default());
    let data = load_snapshot(&db, data_dir, &stats).map_err(|reason| corrupt(&path, reason))?;
    let shared: SharedState = Arc::new(RwLock::new(data));
    Ok((
        LogStore {
            wal: Arc::new(Mutex::new(wal)),
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

/// Where a store keeps its Raft log.
enum StoreFormat {
    /// A store created by this open.
    New,
    /// [`FORMAT`]: in the write-ahead log beside the redb file.
    Current,
    /// [`FORMAT_LOG_IN_REDB`]: in the redb file's `logs` and `meta` tables (to be moved).
    LogInRedb,
}

fn check_identity(
    db: &Database,
    path: &Path,
    cluster: &str,
    raft_id: u64,
) -> Result<StoreFormat, RegistryError> {
    let corrupt = |reason: String| RegistryError::CorruptDataDir {
        path: path.to_path_buf(),
        reason,
    };
    let found;
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
                found = StoreFormat::New;
            }
            (Some(stored), Some(c), Some(id)) => {
                found = match stored.as_slice() {
                    FORMAT => StoreFormat::Current,
                    FORMAT_LOG_IN_REDB => StoreFormat::LogInRedb,
                    _ => {
                        return Err(corrupt(format!(
                            "store format {:?} is not {:?} (or {:?}, which this build converts)",
                            String::from_utf8_lossy(&stored),
                            String::from_utf8_lossy(FORMAT),
                            String::from_utf8_lossy(FORMAT_LOG_IN_REDB)
                        )))
                    }
                };
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
    Ok(found)
}

/// The `meta` key present once the store's write-ahead log has been opened (and so has its
/// files): a store with it whose log directory is empty lost its log.
const LOG_OPENED: &str = "log_opened";

/// Whether `key` is in the `meta` table.
fn meta_present(db: &Database, key: &str) -> StoreResult<bool> {
    let txn = db.begin_read().map_err(read_err)?;
    let table = txn.open_table(META).map_err(read_err)?;
    Ok(table.get(key).map_err(read_err)?.is_some())
}

/// Puts `key` (empty value) in the `meta` table, durably.
fn mark_meta(db: &Database, key: &str) -> StoreResult<()> {
    let txn = db.begin_write().map_err(write_err)?;
    {
        let mut meta = txn.open_table(META).map_err(write_err)?;
        meta.insert(key, b"".as_slice()).map_err(write_err)?;
    }
    txn.commit().map_err(write_err)
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
