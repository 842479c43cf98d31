//! The Raft log and vote of one member ([`LogStore`]): a write-ahead log in
//! `<data_dir>/raft-log/` (the `raft-log` crate, by openraft's author), one record per entry,
//! vote, commit, truncate or purge, appended in order; an `append` is one write and one
//! `fdatasync` on the WAL's flush thread.
//!
//! Why not redb (where the log was until issue 35): a redb transaction rewrites the pages of its
//! B-trees and its header, so with three members fsyncing on one disk a one-entry commit took
//! 0.43 ms at the median where appending the same bytes to a file took 0.26 ms, and a
//! follower's fsync is on every write's critical path (benches/README.md, issue 35).

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use codeq::{Decode, Encode};
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader};
use raft_log::api::raft_log_writer::RaftLogWriter;
use raft_log::RaftLog;

use crate::raft_types::{Entry, LogId, TypeConfig, Vote};

use super::{read_err, write_err, StoreResult};

/// The directory of the write-ahead log inside a member's data directory.
pub const LOG_DIR: &str = "raft-log";

/// A chunk file of the log is closed at this size; a purge deletes whole closed chunks, so this
/// bounds the disk a purged log still takes. The open chunk's entries are all kept in memory
/// too, so it also bounds what the log holds in memory (with [`CACHE_BYTES`]).
const CHUNK_BYTES: usize = 16 * 1024 * 1024;

/// The entries of closed chunks kept in memory (a follower catching up reads older ones from
/// disk).
const CACHE_BYTES: usize = 16 * 1024 * 1024;

/// The read buffer used when the log is replayed at open.
const READ_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// The `raft-log` type parameters: ids and votes as openraft's (JSON inside the WAL record),
/// an entry as its JSON.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct WalTypes;

/// A log id in the WAL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct WalLogId(pub(crate) LogId);

/// A vote in the WAL (ordered as openraft orders votes: the WAL refuses one that goes back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WalVote(pub(crate) Vote);

impl PartialOrd for WalVote {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.0.partial_cmp(&other.0)
    }
}

/// Encodes `value` as length-prefixed JSON.
fn encode_json<T: serde::Serialize, W: io::Write>(value: &T, w: W) -> io::Result<usize> {
    serde_json::to_vec(value)
        .map_err(io::Error::other)?
        .encode(w)
}

/// Decodes length-prefixed JSON.
fn decode_json<T: serde::de::DeserializeOwned, R: io::Read>(r: R) -> io::Result<T> {
    let bytes = Vec::<u8>::decode(r)?;
    serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

impl Encode for WalLogId {
    fn encode<W: io::Write>(&self, w: W) -> io::Result<usize> {
        encode_json(&self.0, w)
    }
}

impl Decode for WalLogId {
    fn decode<R: io::Read>(r: R) -> io::Result<Self> {
        decode_json(r).map(WalLogId)
    }
}

impl Encode for WalVote {
    fn encode<W: io::Write>(&self, w: W) -> io::Result<usize> {
        encode_json(&self.0, w)
    }
}

impl Decode for WalVote {
    fn decode<R: io::Read>(r: R) -> io::Result<Self> {
        decode_json(r).map(WalVote)
    }
}

/// Who hears of a flush: openraft for an append, a waiting caller for the rest.
pub(crate) enum Flushed {
    /// An append: openraft's callback.
    Append(IOFlushed<TypeConfig>),
    /// A vote, truncate or purge: the caller waiting for it.
    Wait(tokio::sync::oneshot::Sender<io::Result<()>>),
    /// A caller on a thread of its own (opening a store).
    Blocking(std::sync::mpsc::Sender<io::Result<()>>),
}

impl raft_log::Callback for Flushed {
    fn send(self, res: io::Result<()>) {
        match self {
            Flushed::Append(callback) => callback.io_completed(res),
            Flushed::Wait(done) => {
                let _ = done.send(res);
            }
            Flushed::Blocking(done) => {
                let _ = done.send(res);
            }
        }
    }
}

impl raft_log::Types for WalTypes {
    type LogId = WalLogId;
    type LogPayload = Vec<u8>;
    type Vote = WalVote;
    type Callback = Flushed;
    type UserData = Vec<u8>;

    fn log_index(log_id: &WalLogId) -> u64 {
        log_id.0.index
    }

    fn payload_size(payload: &Vec<u8>) -> u64 {
        payload.len() as u64
    }
}

/// The write-ahead log, shared by the store and its readers.
pub(crate) type Wal = Arc<Mutex<RaftLog<WalTypes>>>;

/// Opens (or creates) the write-ahead log in `dir`.
pub(crate) fn open_wal(dir: &Path) -> io::Result<RaftLog<WalTypes>> {
    std::fs::create_dir_all(dir)?;
    let mut wal = raft_log::chunked_wal::Config::new(dir.display());
    wal.chunk_max_size = Some(CHUNK_BYTES);
    wal.read_buffer_size = Some(READ_BUFFER_BYTES);
    // Flush at once: the WAL's default waits up to 1 ms to gather writes, and an append's
    // latency is the write's. Writes that arrive during a flush still go together.
    wal.flush_batch_wait = Some(Duration::ZERO);
    let config = raft_log::Config {
        wal,
        log_cache_capacity: Some(CACHE_BYTES),
        ..Default::default()
    };
    RaftLog::open(Arc::new(config))
}

/// Locks the log.
fn lock_wal(wal: &Wal) -> StoreResult<MutexGuard<'_, RaftLog<WalTypes>>> {
    wal.lock()
        .map_err(|_| write_err("the registry log lock is poisoned"))
}

/// The Raft log and vote of one member (and its log reader: it is cheap to clone).
#[derive(Clone)]
pub struct LogStore {
    pub(super) wal: Wal,
}

impl LogStore {
    /// A handle on the log, so the owner can close it last (releasing its directory lock).
    pub(crate) fn wal_handle(&self) -> Wal {
        self.wal.clone()
    }

    /// Runs `write`, then flushes the log with fsync and waits for it.
    async fn write_and_flush(
        &self,
        write: impl FnOnce(&mut RaftLog<WalTypes>) -> io::Result<()>,
    ) -> StoreResult<()> {
        let (done, answer) = tokio::sync::oneshot::channel();
        {
            let mut log = lock_wal(&self.wal)?;
            write(&mut log)?;
            log.flush(true, Some(Flushed::Wait(done)))?;
        }
        answer
            .await
            .map_err(|_| write_err("the registry log's flush thread stopped"))?
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry>> {
        let from = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let log = lock_wal(&self.wal)?;
        let state = log.log_state();
        // What the WAL holds: (purged, last].
        let first = state.purged().map_or(0, |p| p.0.index + 1);
        let end = state.last().map_or(0, |l| l.0.index + 1);
        let to = match range.end_bound() {
            Bound::Included(i) => i.saturating_add(1),
            Bound::Excluded(i) => *i,
            Bound::Unbounded => end,
        }
        .min(end);
        let from = from.max(first);
        if from >= to {
            return Ok(Vec::new());
        }
        // The bytes under the lock, decoded after it: appends do not wait for the decoding.
        let stored: Vec<Vec<u8>> = log
            .read(from, to)
            .map(|item| item.map(|(_, bytes)| bytes).map_err(read_err))
            .collect::<StoreResult<_>>()?;
        drop(log);
        stored
            .iter()
            .map(|bytes| serde_json::from_slice::<Entry>(bytes).map_err(read_err))
            .collect()
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote>> {
        let log = lock_wal(&self.wal)?;
        Ok(log.log_state().vote().map(|v| v.0))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StoreResult<LogState<TypeConfig>> {
        let log = lock_wal(&self.wal)?;
        let state = log.log_state();
        Ok(LogState {
            last_purged_log_id: state.purged().map(|p| p.0),
            last_log_id: state.last().map(|l| l.0),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// The vote is a record of the same log, after every append queued before it, and its
    /// flush syncs everything before it: when it is saved, every entry appended before it is
    /// durable too. openraft 0.10 marks a new leader's whole log as flushed when it takes office
    /// (openraft issue #2118), appends still in flight included; a member takes office only
    /// after saving its vote for itself, and by then nothing it appended before is in flight.
    async fn save_vote(&mut self, vote: &Vote) -> StoreResult<()> {
        let vote = WalVote(*vote);
        self.write_and_flush(|log| log.save_vote(vote).map(|_| ()))
            .await
    }

    /// No flush of its own: the record goes to disk with the next append, truncate, purge or
    /// vote. It is only an optimization (the committed entries are replayed at start), and an
    /// older value is still a committed value.
    async fn save_committed(&mut self, committed: Option<LogId>) -> StoreResult<()> {
        let Some(committed) = committed else {
            return Ok(());
        };
        let mut log = lock_wal(&self.wal)?;
        let newer = log.log_state().committed().is_none_or(|c| c.0 < committed);
        let held = log.log_state().last().is_some_and(|l| l.0 >= committed);
        // The WAL refuses a commit beyond its last entry (openraft may know an entry committed
        // before this member has it, after a snapshot); it is then written with a later one.
        if newer && held {
            log.commit(WalLogId(committed)).map_err(write_err)?;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> StoreResult<Option<LogId>> {
        let log = lock_wal(&self.wal)?;
        Ok(log.log_state().committed().map(|c| c.0))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut records = Vec::new();
        for entry in entries {
            let bytes = serde_json::to_vec(&entry).map_err(write_err)?;
            records.push((WalLogId(entry.log_id), bytes));
        }
        let mut log = lock_wal(&self.wal)?;
        log.append(records).map_err(write_err)?;
        // Readable at once; the callback tells openraft when it is durable.
        log.flush(true, Some(Flushed::Append(callback)))
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> StoreResult<()> {
        let from = last_log_id.map_or(0, |l| l.index + 1);
        self.write_and_flush(|log| {
            let end = log.log_state().last().map_or(0, |l| l.0.index + 1);
            if from < end {
                log.truncate(from)?;
            }
            Ok(())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> StoreResult<()> {
        self.write_and_flush(|log| log.purge(WalLogId(log_id)).map(|_| ()))
            .await
    }
}
