//! The Raft log and vote of one member ([`LogStore`]): one redb transaction per `append`
//! (one fsync), run in order on the `registry-log` writer thread (see [`super`]).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{mpsc, Arc, Mutex};

use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader};
use redb::{Database, Durability, ReadableTable};

use crate::raft_types::{Entry, LogId, TypeConfig, Vote};

use super::{get_meta, read_err, write_err, StoreResult, LOGS, META};

/// Entries handed to `append` whose transaction has not committed yet, by index.
pub(super) type Pending = Arc<Mutex<BTreeMap<u64, Entry>>>;

/// The most log entries one purge transaction deletes (see `purge_upto`).
const PURGE_CHUNK: u64 = 256;

/// A log transaction for the writer thread.
pub(super) enum LogJob {
    Append {
        encoded: Vec<(u64, Vec<u8>)>,
        ids: Vec<LogId>,
        committed: Option<Vec<u8>>,
        callback: IOFlushed<TypeConfig>,
    },
    Truncate {
        /// The first index deleted.
        from: u64,
        committed: Option<Vec<u8>>,
        done: tokio::sync::oneshot::Sender<StoreResult<()>>,
    },
    Purge {
        log_id: LogId,
        committed: Option<Vec<u8>>,
        done: tokio::sync::oneshot::Sender<StoreResult<()>>,
    },
    /// The vote, behind every append queued before it (see [`LogStore::save_vote`]).
    Vote {
        encoded: Vec<u8>,
        done: tokio::sync::oneshot::Sender<StoreResult<()>>,
    },
}

/// The writer thread: runs log transactions one after the other until every [`LogStore`] is
/// gone. It holds the database weakly, so closing the store still releases the file.
pub(super) fn spawn_writer(
    db: &Arc<Database>,
    pending: Pending,
) -> std::io::Result<mpsc::Sender<LogJob>> {
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
                        callback.io_completed(result);
                    }
                    LogJob::Truncate {
                        from,
                        committed,
                        done,
                    } => {
                        let result = with_db(&|db| truncate_from(db, from, committed.as_deref()));
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
                    LogJob::Vote { encoded, done } => {
                        let result = with_db(&|db| write_vote(db, &encoded));
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

/// Writes the vote.
fn write_vote(db: &Database, encoded: &[u8]) -> StoreResult<()> {
    let mut txn = db.begin_write().map_err(write_err)?;
    txn.set_durability(Durability::Immediate);
    {
        let mut meta = txn.open_table(META).map_err(write_err)?;
        meta.insert("vote", encoded).map_err(write_err)?;
    }
    txn.commit().map_err(write_err)
}

/// Deletes the entries from index `from` on.
fn truncate_from(db: &Database, from: u64, committed: Option<&[u8]>) -> StoreResult<()> {
    let mut txn = db.begin_write().map_err(write_err)?;
    txn.set_durability(Durability::Immediate);
    {
        let mut table = txn.open_table(LOGS).map_err(write_err)?;
        table
            .retain_in::<u64, _>(from.., |_, _| false)
            .map_err(write_err)?;
    }
    write_committed(&txn, committed)?;
    txn.commit().map_err(write_err)
}

/// Deletes the entries up to `log_id` and records it as the last purged.
fn purge_upto(db: &Database, log_id: LogId, committed: Option<&[u8]>) -> StoreResult<()> {
    let first = {
        let txn = db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let first = table.first().map_err(read_err)?.map(|(k, _)| k.value());
        first
    };
    // In transactions of at most PURGE_CHUNK entries: redb copies a leaf and its branches for
    // each deletion and reuses the pages a transaction frees only after it commits, so one
    // purge of ~19,000 entries grew a store from 11 MB to 342 MB (for good: redb does not
    // shrink its file). Each chunk records what it purged, so a crash between two leaves the
    // log whole from `last_purged` on.
    let mut lo = first.unwrap_or(log_id.index + 1).min(log_id.index + 1);
    loop {
        let hi = lo.saturating_add(PURGE_CHUNK - 1).min(log_id.index);
        let last = hi >= log_id.index;
        let mut txn = db.begin_write().map_err(write_err)?;
        txn.set_durability(Durability::Immediate);
        {
            let mut table = txn.open_table(LOGS).map_err(write_err)?;
            let purged = if last {
                Some(log_id)
            } else {
                match table.get(hi).map_err(write_err)? {
                    Some(v) => {
                        let entry: Entry = serde_json::from_slice(v.value()).map_err(write_err)?;
                        Some(entry.log_id)
                    }
                    None => None,
                }
            };
            table
                .retain_in::<u64, _>(..=hi, |_, _| false)
                .map_err(write_err)?;
            if let Some(purged) = purged {
                let bytes = serde_json::to_vec(&Some(purged)).map_err(write_err)?;
                let mut meta = txn.open_table(META).map_err(write_err)?;
                meta.insert("last_purged", bytes.as_slice())
                    .map_err(write_err)?;
            }
        }
        if last {
            write_committed(&txn, committed)?;
        }
        txn.commit().map_err(write_err)?;
        if last {
            return Ok(());
        }
        lo = hi + 1;
    }
}

/// The Raft log and vote of one member (and its log reader: it is cheap to clone).
#[derive(Clone)]
pub struct LogStore {
    pub(super) db: Arc<Database>,
    /// The last committed log id openraft reported, not yet written: the next log transaction
    /// writes it along (see the module docs).
    pub(super) committed: Arc<Mutex<Option<LogId>>>,
    /// Appended entries not committed yet (readable meanwhile).
    pub(super) pending: Pending,
    /// The writer thread's queue.
    pub(super) writer: mpsc::Sender<LogJob>,
}

impl LogStore {
    /// Queues a truncate, purge or vote and waits for its commit.
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
    ) -> StoreResult<Vec<Entry>> {
        let bounds: (Bound<u64>, Bound<u64>) =
            (range.start_bound().cloned(), range.end_bound().cloned());
        // Pending first, then the database: an entry leaves the pending map only after its
        // transaction committed, so it is in one or the other.
        let pending: Vec<Entry> = self
            .pending
            .lock()
            .map_err(|_| read_err("pending entries lock poisoned"))?
            .range(bounds)
            .map(|(_, e)| e.clone())
            .collect();
        let txn = self.db.begin_read().map_err(read_err)?;
        let table = txn.open_table(LOGS).map_err(read_err)?;
        let mut out: BTreeMap<u64, Entry> = BTreeMap::new();
        for item in table.range::<u64>(bounds).map_err(read_err)? {
            let (k, v) = item.map_err(read_err)?;
            let entry: Entry = serde_json::from_slice(v.value()).map_err(read_err)?;
            out.insert(k.value(), entry);
        }
        for entry in pending {
            out.insert(entry.log_id.index, entry);
        }
        Ok(out.into_values().collect())
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote>> {
        get_meta(&self.db, "vote")
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
                let entry: Entry = serde_json::from_slice(v.value()).map_err(read_err)?;
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

    /// The vote goes through the writer thread like the appends, so when it is saved every
    /// entry appended before it is durable too. openraft 0.10 marks a new leader's whole log as
    /// flushed when it takes office (openraft issue #2118), appends still in flight included;
    /// a member takes office only after saving its vote for itself, and by then nothing it
    /// appended before is in flight any more.
    async fn save_vote(&mut self, vote: &Vote) -> StoreResult<()> {
        let encoded = serde_json::to_vec(vote).map_err(write_err)?;
        self.run_job(|done| LogJob::Vote { encoded, done }).await
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

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
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

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> StoreResult<()> {
        let from = last_log_id.map_or(0, |l| l.index + 1);
        let committed = self.pending_committed()?;
        if let Ok(mut pending) = self.pending.lock() {
            pending.retain(|index, _| *index < from);
        }
        self.run_job(|done| LogJob::Truncate {
            from,
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
