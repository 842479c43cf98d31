//! G3 at scale (issue 13): a snapshot is due after *commands* in proportion to the state (a
//! leader batches many commands into one entry), it lives in its own file beside the redb
//! store, and a restart loads it (a damaged one is refused: N3).

mod common;

use std::time::Duration;

use common::*;
use lineage_registry::client::NewSession;
use lineage_registry::snapshot_file::SNAPSHOT_FILE;
use lineage_registry::{Consistency, RegistryNode};
use lineage_testkit::NatsServer;

async fn three_small(server: &NatsServer, dirs: &[tempfile::TempDir]) -> Vec<RegistryNode> {
    let mut nodes = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        let mut c = config(i as u64 + 1, &path(d));
        c.snapshot_commands_since_last = 50;
        nodes.push(start(server, c).await);
    }
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g3_batched_commands_trigger_a_snapshot_file_that_a_restart_loads() {
    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(3);
    let nodes = three_small(&server, &dirs).await;
    nodes[0].initialize(members(&[1, 2, 3])).await.unwrap();
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    agreed_leader(&refs, Duration::from_secs(5)).await;
    let client = nodes[0].client();
    let root = root_header(1);
    client
        .register_session(rid("r1"), 1, root.clone(), NewSession::default())
        .await
        .unwrap();
    confirm(&client, 1, node_id(1), 0).await;
    // 120 concurrent writes: batched, they take far fewer than 50 log entries, so an
    // entry-count policy of 50 would not snapshot; 120 commands do.
    let mut tasks = Vec::new();
    for n in 2..122u32 {
        let client = client.clone();
        let h = child_header(&root, n);
        tasks.push(tokio::spawn(async move {
            client
                .register_session(rid(format!("r{n}")), n as u64, h, NewSession::default())
                .await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let last = client
        .status(Consistency::Linearizable)
        .await
        .unwrap()
        .last_applied
        .unwrap();
    assert!(last < 60, "the writes should have batched ({last} entries)");
    all_applied(&refs, last, Duration::from_secs(5)).await;
    wait_for_async(
        Duration::from_secs(10),
        "a snapshot on every member",
        || async {
            nodes
                .iter()
                .all(|n| n.store_stats().figures().built_total >= 1)
        },
    )
    .await;
    for (n, d) in nodes.iter().zip(&dirs) {
        let f = n.store_stats().figures();
        assert!(f.build_bytes > 0, "member {}: {f:?}", n.raft_id());
        assert!(
            path(d).join(SNAPSHOT_FILE).is_file(),
            "member {} has no snapshot file",
            n.raft_id()
        );
    }
    let digest = nodes[0].state_digest().unwrap();
    for n in nodes {
        n.shutdown().await.unwrap();
    }

    let nodes = three_small(&server, &dirs).await;
    for n in &nodes {
        let f = n.store_stats().figures();
        assert!(
            f.load_bytes > 0,
            "member {} did not load its snapshot file: {f:?}",
            n.raft_id()
        );
    }
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    agreed_leader(&refs, Duration::from_secs(5)).await;
    all_applied(&refs, last, Duration::from_secs(5)).await;
    for n in &nodes {
        assert_eq!(n.state_digest().unwrap(), digest, "member {}", n.raft_id());
        assert_eq!(n.local_state().unwrap().session_count(), 121);
    }
    for n in nodes {
        n.shutdown().await.unwrap();
    }

    // N3: one byte of member 3's snapshot file damaged (near its end: the last part of the
    // state data) is refused at open, one line naming the directory, never loaded as a
    // different state.
    let file = path(&dirs[2]).join(SNAPSHOT_FILE);
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() - 5;
    bytes[at] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();
    let mut c = config(3, &path(&dirs[2]));
    c.snapshot_commands_since_last = 50;
    let err = match RegistryNode::start(c, connect(&server).await).await {
        Ok(_) => panic!("a member loaded a damaged snapshot"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("fails its checksum")
            && err.contains(&path(&dirs[2]).display().to_string())
            && !err.contains('\n'),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g3_a_snapshot_file_without_its_store_is_refused_naming_what_to_do() {
    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(1);
    std::fs::create_dir_all(path(&dirs[0])).unwrap();
    std::fs::write(path(&dirs[0]).join(SNAPSHOT_FILE), b"LNSNAP1\n").unwrap();
    let client = connect(&server).await;
    let err = match RegistryNode::start(config(1, &path(&dirs[0])), client).await {
        Ok(_) => panic!("a member started on a snapshot without its store"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("remove the whole directory") && !err.contains('\n'),
        "{err}"
    );
    assert!(
        !path(&dirs[0])
            .join(lineage_registry::storage::DB_FILE)
            .exists(),
        "the refused open created a store"
    );
}
