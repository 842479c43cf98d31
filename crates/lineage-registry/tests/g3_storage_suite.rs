//! G3: the store (the Raft log in its write-ahead log, the rest in redb) passes openraft's
//! storage conformance suite, and refuses foreign or
//! corrupt data directories.

use lineage_registry::raft_types::TypeConfig;
use lineage_registry::storage::{open_store, LogStore, StateMachineStore, DB_FILE, LOG_DIR};
use lineage_registry::RegistryError;
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;

struct RedbBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for RedbBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, sm) = open_store(dir.path(), "suite", 0).expect("open store");
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g3_store_passes_openraft_suite() {
    Suite::test_all(RedbBuilder)
        .await
        .expect("openraft storage suite");
}

#[test]
fn g3_foreign_or_corrupt_data_dir_is_refused_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    // A file that is not a redb database.
    std::fs::write(
        dir.path().join(DB_FILE),
        b"this is not a database at all, not even close",
    )
    .unwrap();
    let err = open_store(dir.path(), "c1", 1).err().expect("refused");
    let msg = err.to_string();
    assert!(matches!(err, RegistryError::CorruptDataDir { .. }), "{msg}");
    assert!(msg.contains(DB_FILE), "{msg}");
    // The file is left alone: never reset silently.
    assert_eq!(
        std::fs::read(dir.path().join(DB_FILE)).unwrap(),
        b"this is not a database at all, not even close"
    );

    // A store of another cluster, or another raft id.
    let dir = tempfile::tempdir().unwrap();
    drop(open_store(dir.path(), "c1", 1).unwrap());
    let err = open_store(dir.path(), "c2", 1).err().expect("refused");
    assert!(err.to_string().contains("cluster"), "{err}");
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
    let err = open_store(dir.path(), "c1", 2).err().expect("refused");
    assert!(err.to_string().contains("raft id 1"), "{err}");
    // The rightful owner still opens it.
    assert!(open_store(dir.path(), "c1", 1).is_ok());

    // A store whose Raft log is gone, or a Raft log whose store (identity) is gone: refused,
    // naming what to do, and nothing is created in its place.
    let log_dir = dir.path().join(LOG_DIR);
    std::fs::rename(&log_dir, dir.path().join("kept-log")).unwrap();
    let err = open_store(dir.path(), "c1", 1).err().expect("refused");
    assert!(matches!(err, RegistryError::CorruptDataDir { .. }), "{err}");
    assert!(err.to_string().contains(LOG_DIR), "{err}");
    assert!(
        err.to_string().contains("remove the whole directory"),
        "{err}"
    );
    assert!(!log_dir.exists());
    std::fs::rename(dir.path().join("kept-log"), &log_dir).unwrap();
    // A log directory that is there but emptied (its chunk files deleted): the same, not an
    // empty log that would forget the member's vote.
    let kept = dir.path().join("kept-chunks");
    std::fs::create_dir(&kept).unwrap();
    let chunks: Vec<_> = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    assert!(!chunks.is_empty(), "the log has its files");
    for chunk in &chunks {
        std::fs::rename(chunk, kept.join(chunk.file_name().unwrap())).unwrap();
    }
    let err = open_store(dir.path(), "c1", 1).err().expect("refused");
    assert!(matches!(err, RegistryError::CorruptDataDir { .. }), "{err}");
    assert!(err.to_string().contains(LOG_DIR), "{err}");
    assert!(
        err.to_string().contains("remove the whole directory"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&log_dir).unwrap().count(),
        0,
        "nothing created"
    );
    for chunk in &chunks {
        std::fs::rename(kept.join(chunk.file_name().unwrap()), chunk).unwrap();
    }
    assert!(open_store(dir.path(), "c1", 1).is_ok());
    std::fs::remove_file(dir.path().join(DB_FILE)).unwrap();
    let err = open_store(dir.path(), "c1", 1).err().expect("refused");
    assert!(err.to_string().contains(DB_FILE), "{err}");
    assert!(
        err.to_string().contains("remove the whole directory"),
        "{err}"
    );
    assert!(!dir.path().join(DB_FILE).exists());
}

#[tokio::test]
async fn g3_committed_id_is_written_with_the_next_log_flush() {
    use lineage_registry::raft_types::Entry;
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::EntryPayload;

    let id = log_id;
    let blank = |index: u64| Entry {
        log_id: id(index),
        payload: EntryPayload::Blank,
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut log, sm) = open_store(dir.path(), "c1", 1).unwrap();
    log.blocking_append([blank(1), blank(2)]).await.unwrap();
    // Saving it costs no flush of its own; it is seen at once by this process...
    log.save_committed(Some(id(2))).await.unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(id(2)));
    // ...an older one never replaces it, and one beyond the last entry waits for its entry.
    log.save_committed(Some(id(1))).await.unwrap();
    log.save_committed(Some(id(9))).await.unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(id(2)));
    // The next append's flush writes it along.
    log.blocking_append([blank(3)]).await.unwrap();
    drop((log, sm));
    let (mut log, _sm) = open_store(dir.path(), "c1", 1).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(id(2)));
}

#[tokio::test]
async fn g3_a_saved_vote_means_every_entry_appended_before_it_is_durable() {
    // openraft issue #2118: a member that takes office counts its whole log as flushed. It takes
    // office only after saving its vote, so the vote must not overtake an append in flight.
    use lineage_registry::raft_types::{Entry, Vote};
    use openraft::storage::{IOFlushed, RaftLogStorage};
    use openraft::{EntryPayload, RaftLogReader};

    let dir = tempfile::tempdir().unwrap();
    let (mut log, sm) = open_store(dir.path(), "c1", 1).unwrap();
    let blanks: Vec<Entry> = (1..=200)
        .map(|index| Entry {
            log_id: log_id(index),
            payload: EntryPayload::Blank,
        })
        .collect();
    // Queued, not awaited: nobody waits for these flushes.
    for chunk in blanks.chunks(10) {
        log.append(chunk.to_vec(), IOFlushed::noop()).await.unwrap();
    }
    log.save_vote(&Vote::new(2, 1)).await.unwrap();
    drop((log, sm));
    let (mut log, _sm) = open_store(dir.path(), "c1", 1).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
    assert_eq!(log.try_get_log_entries(1..=200).await.unwrap().len(), 200);
}

#[tokio::test]
async fn g3_a_large_purge_does_not_balloon_the_store() {
    // One purge of ~19,000 entries in one redb transaction grew a store from 11 MB to 342 MB
    // when the log was in redb. In the write-ahead log a purge is one record (and the removal
    // of whole chunks): the data directory stays near its size.
    use lineage_registry::raft_types::Entry;
    use lineage_registry::types::CommandBatch;
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::{EntryPayload, RaftLogReader};

    let dir = tempfile::tempdir().unwrap();
    let (mut log, sm) = open_store(dir.path(), "c1", 1).unwrap();
    let id = log_id;
    let batch = CommandBatch::default();
    let n = 20_000u64;
    for start in (1..=n).step_by(500) {
        let entries: Vec<Entry> = (start..start + 500)
            .map(|index| Entry {
                log_id: id(index),
                payload: if index % 2 == 0 {
                    EntryPayload::Normal(batch.clone())
                } else {
                    EntryPayload::Blank
                },
            })
            .collect();
        log.blocking_append(entries).await.unwrap();
    }
    let before = dir_bytes(dir.path());
    log.purge(id(19_000)).await.unwrap();
    let after = dir_bytes(dir.path());
    assert!(
        after <= before * 2,
        "the store grew from {before} to {after} bytes on one purge"
    );
    assert_eq!(
        log.try_get_log_entries(19_001..=n).await.unwrap().len(),
        1000
    );
    assert!(log
        .try_get_log_entries(1..=19_000)
        .await
        .unwrap()
        .is_empty());
    drop((log, sm));
}

/// The bytes of the files in `dir` and its subdirectories.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| match e.metadata().unwrap() {
            m if m.is_dir() => dir_bytes(&e.path()),
            m => m.len(),
        })
        .sum()
}

/// The id of entry `index` of term 1, leader 1.
fn log_id(index: u64) -> lineage_registry::raft_types::LogId {
    openraft::LogId::new(
        openraft::impls::leader_id_adv::LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}
