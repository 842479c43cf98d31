//! Moving a store's Raft log out of redb, once, when a store of format `lineage-registry/2`
//! is opened (G5: upgrades keep data).
//!
//! The log's entries, vote, last purged and committed ids are copied from the redb file into a
//! new write-ahead log and flushed with fsync; then one redb transaction drops the `logs`
//! table and those keys and sets the format to `/3`. A conversion cut short leaves the redb file
//! at `/2` with everything in it, and the next open starts again from a fresh log directory. An
//! older build refuses the converted store by its format, so it can never start with no vote.

use std::path::Path;

use raft_log::api::raft_log_writer::RaftLogWriter;
use raft_log::RaftLog;
use redb::{Database, ReadableTable};

use super::log::{open_wal, Flushed, WalLogId, WalTypes, WalVote};
use super::{get_meta, FORMAT, LOGS, META};
use crate::error::RegistryError;
use crate::raft_types::{Entry, LogId, Vote};

/// Entries appended to the new log between two hand-overs to its flush thread.
const COPY_BATCH: usize = 1024;

/// Copies the log of the redb store at `path` into a new write-ahead log in `log_dir`, then
/// drops it from redb and marks the store converted; answers the new log.
pub(super) fn log_out_of_redb(
    db: &Database,
    path: &Path,
    log_dir: &Path,
) -> Result<RaftLog<WalTypes>, RegistryError> {
    let corrupt = |at: &Path, reason: String| RegistryError::CorruptDataDir {
        path: at.to_path_buf(),
        reason: format!("while moving its Raft log out of redb: {reason}"),
    };
    if log_dir.exists() {
        // A conversion cut short: the redb file still holds the whole log.
        std::fs::remove_dir_all(log_dir).map_err(|e| corrupt(log_dir, e.to_string()))?;
    }
    let vote: Option<Vote> = get_meta(db, "vote").map_err(|e| corrupt(path, e.to_string()))?;
    let committed: Option<LogId> = get_meta::<Option<LogId>>(db, "committed")
        .map_err(|e| corrupt(path, e.to_string()))?
        .flatten();
    let purged: Option<LogId> = get_meta::<Option<LogId>>(db, "last_purged")
        .map_err(|e| corrupt(path, e.to_string()))?
        .flatten();

    let in_log = |e: std::io::Error| corrupt(log_dir, e.to_string());
    let mut wal = open_wal(log_dir).map_err(in_log)?;
    if let Some(vote) = vote {
        wal.save_vote(WalVote(vote)).map_err(in_log)?;
    }
    if let Some(purged) = purged {
        wal.purge(WalLogId(purged)).map_err(in_log)?;
    }
    let mut batch: Vec<(WalLogId, Vec<u8>)> = Vec::new();
    {
        let txn = db.begin_read().map_err(|e| corrupt(path, e.to_string()))?;
        let logs = txn
            .open_table(LOGS)
            .map_err(|e| corrupt(path, e.to_string()))?;
        for item in logs.iter().map_err(|e| corrupt(path, e.to_string()))? {
            let (_, value) = item.map_err(|e| corrupt(path, e.to_string()))?;
            let bytes = value.value().to_vec();
            let entry: Entry = serde_json::from_slice(&bytes)
                .map_err(|e| corrupt(path, format!("an undecodable log entry ({e})")))?;
            batch.push((WalLogId(entry.log_id), bytes));
            if batch.len() >= COPY_BATCH {
                // Handed to the flush thread as it goes, not all held in memory.
                wal.append(std::mem::take(&mut batch)).map_err(in_log)?;
                wal.flush(false, None).map_err(in_log)?;
            }
        }
    }
    wal.append(batch).map_err(in_log)?;
    if let Some(committed) = committed {
        let held = wal.log_state().last().is_some_and(|l| l.0 >= committed);
        if held {
            wal.commit(WalLogId(committed)).map_err(in_log)?;
        }
    }
    let (done, flushed) = std::sync::mpsc::channel();
    wal.flush(true, Some(Flushed::Blocking(done)))
        .map_err(in_log)?;
    flushed
        .recv()
        .map_err(|_| corrupt(log_dir, "the log's flush thread stopped".into()))?
        .map_err(|e| corrupt(log_dir, e.to_string()))?;

    // Durable in the new log: drop it from redb, in the transaction that marks the store /3.
    let txn = db.begin_write().map_err(|e| corrupt(path, e.to_string()))?;
    txn.delete_table(LOGS)
        .map_err(|e| corrupt(path, e.to_string()))?;
    {
        let mut meta = txn
            .open_table(META)
            .map_err(|e| corrupt(path, e.to_string()))?;
        for key in ["vote", "committed", "last_purged"] {
            meta.remove(key).map_err(|e| corrupt(path, e.to_string()))?;
        }
        meta.insert("format", FORMAT)
            .map_err(|e| corrupt(path, e.to_string()))?;
    }
    txn.open_table(LOGS)
        .map_err(|e| corrupt(path, e.to_string()))?;
    txn.commit().map_err(|e| corrupt(path, e.to_string()))?;
    tracing::info!(
        store = %path.display(),
        log = %log_dir.display(),
        "moved the registry's Raft log out of redb into its write-ahead log (store format lineage-registry/3)"
    );
    Ok(wal)
}
