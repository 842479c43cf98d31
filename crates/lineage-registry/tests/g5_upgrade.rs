//! G5: an upgrade keeps the registry's data. The stores in `tests/fixtures/registry-0.9` were
//! written by the openraft 0.9 build of lineage (`HOW.md` beside each says how): one with its
//! whole history in the log, one with a snapshot file and a purged log. This build opens copies
//! of them (no step of its own: the open moves the Raft log out of redb into the write-ahead
//! log, format `lineage-registry/3`), elects the member, serves every session the old build
//! listed with the state it listed, takes new writes, and still does after a restart.
//! The Raft messages the old build sent decode as this build's types (the JSON did not change);
//! the old build is kept out of a group by its RPC subjects (`g5_mixed_versions` in the e2e
//! suite), not by its messages.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use lineage_core::ids::NodeId;
use lineage_registry::client::NewSession;
use lineage_registry::listing::ListFilter;
use lineage_registry::raft_types::TypeConfig;
use lineage_registry::{Consistency, RegistryClient, RegistryNode, RegistryNodeConfig};
use lineage_testkit::NatsServer;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/registry-0.9")
        .join(name)
}

/// A copy of the fixture's data directory (opening a redb file writes to it).
fn copy_data(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("registry");
    std::fs::create_dir_all(&data).unwrap();
    for f in std::fs::read_dir(fixture(name).join("data")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), data.join(f.file_name())).unwrap();
    }
    dir
}

/// What the old build listed: session id -> state.
fn expected(name: &str) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(fixture(name).join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["cluster"], "dev");
    assert_eq!(v["raft_id"], 1);
    v["ls_all"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["session"].as_str().unwrap().to_owned(),
                s["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Every session the member lists, with its state.
async fn listed(client: &RegistryClient) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut after = None;
    for _ in 0..1000 {
        let (page, next) = client
            .list_page(ListFilter::default(), after, 500, Consistency::Linearizable)
            .await
            .unwrap();
        for r in page {
            let state = serde_json::to_value(r.state).unwrap();
            out.insert(
                r.header.id().to_string(),
                state.as_str().unwrap().to_owned(),
            );
        }
        match next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
    panic!("more than 1000 pages");
}

fn member_config(dir: &tempfile::TempDir) -> RegistryNodeConfig {
    RegistryNodeConfig::new(
        "dev",
        1,
        NodeId::parse("node-1").unwrap(),
        dir.path().join("registry"),
    )
    .fast()
}

async fn open_and_serve(name: &str) {
    let server = NatsServer::start().unwrap();
    let dir = copy_data(name);
    let want = expected(name);
    assert!(!want.is_empty());

    let node = RegistryNode::start(member_config(&dir), connect(&server).await)
        .await
        .unwrap();
    // Initialized by the old build: never again.
    let one = BTreeMap::from([(1, NodeId::parse("node-1").unwrap())]);
    assert!(!node.initialize(one).await.unwrap());
    agreed_leader(&[&node], Duration::from_secs(10)).await;
    let client = RegistryClient::new(connect(&server).await, "dev");
    assert_eq!(
        listed(&client).await,
        want,
        "{name}: the sessions the 0.9 build listed"
    );

    // New writes go on top, and all of it survives a restart.
    let root = sid(900_001);
    client
        .register_session(
            rid("g5-new-root"),
            1_900_000_000_000,
            root_header(900_001),
            NewSession {
                node: Some(NodeId::parse("node-1").unwrap()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    node.shutdown().await.unwrap();
    let node = RegistryNode::start(member_config(&dir), connect(&server).await)
        .await
        .unwrap();
    agreed_leader(&[&node], Duration::from_secs(10)).await;
    let after = listed(&client).await;
    assert_eq!(after.len(), want.len() + 1);
    assert_eq!(
        after.get(&root.to_string()).map(String::as_str),
        Some("starting")
    );
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g5_a_store_written_by_openraft_09_opens_and_serves_what_it_held() {
    open_and_serve("single").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g5_a_snapshot_and_purged_log_written_by_openraft_09_open_and_serve_what_they_held() {
    assert!(fixture("snapshotted").join("data/snapshot").exists());
    open_and_serve("snapshotted").await;
}

#[tokio::test]
async fn g5_opening_an_older_store_moves_its_log_out_of_redb_even_after_a_try_cut_short() {
    use lineage_registry::storage::{open_store, LOG_DIR};
    use openraft::storage::RaftLogStorage;
    use openraft::RaftLogReader;

    for name in ["single", "snapshotted"] {
        let dir = copy_data(name);
        let data = dir.path().join("registry");
        // A conversion cut short: a log directory (half a chunk) beside a store still at /2.
        std::fs::create_dir_all(data.join(LOG_DIR)).unwrap();
        std::fs::write(
            data.join(LOG_DIR).join("r-00_000_000_000_000_000_000.wal"),
            b"half a chunk",
        )
        .unwrap();
        let (mut log, sm) = open_store(&data, "dev", 1).unwrap();
        let state = log.get_log_state().await.unwrap();
        let vote = log.read_vote().await.unwrap();
        let committed = log.read_committed().await.unwrap();
        let last = state.last_log_id.expect("a log");
        let first = state.last_purged_log_id.as_ref().map_or(0, |p| p.index + 1);
        let entries = log.try_get_log_entries(first..=last.index).await.unwrap();
        assert_eq!(entries.len() as u64, last.index + 1 - first, "{name}");
        assert_eq!(entries.last().unwrap().log_id, last, "{name}");
        assert!(vote.is_some(), "{name}: the vote was kept");
        if name == "snapshotted" {
            assert!(state.last_purged_log_id.is_some(), "{name}: purged");
        }
        drop((log, sm));
        // Opened again (now /3): the same log, read from the write-ahead log alone.
        let (mut log, _sm) = open_store(&data, "dev", 1).unwrap();
        assert_eq!(log.get_log_state().await.unwrap(), state, "{name}");
        assert_eq!(log.read_vote().await.unwrap(), vote, "{name}");
        assert_eq!(log.read_committed().await.unwrap(), committed, "{name}");
        assert_eq!(
            log.try_get_log_entries(first..=last.index).await.unwrap(),
            entries,
            "{name}"
        );
    }
}

#[test]
fn g5_the_raft_messages_of_openraft_09_decode_as_this_builds_types() {
    let wire = fixture("wire");
    let mut decoded = 0;
    for f in std::fs::read_dir(&wire).unwrap() {
        let path = f.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let bytes = std::fs::read(&path).unwrap();
        if name.starts_with("append-") && !name.contains("reply") {
            let req: AppendEntriesRequest<TypeConfig> =
                serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            // Encoded again, it is the same JSON.
            let again: serde_json::Value = serde_json::to_value(&req).unwrap();
            let was: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(again, was, "{name}");
            decoded += 1;
        } else if name.starts_with("append-") {
            let _: Result<AppendEntriesResponse<TypeConfig>, serde_json::Value> =
                serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            decoded += 1;
        } else if name.starts_with("vote-") && !name.contains("reply") {
            let _: VoteRequest<TypeConfig> =
                serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            decoded += 1;
        }
    }
    assert!(decoded >= 10, "{decoded} messages decoded");
}
