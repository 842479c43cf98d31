//! G1, G3: three voters in one process over a real nats-server, real redb files.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lineage_registry::client::NewSession;
use lineage_registry::{Consistency, RegistryClient, RegistryNode};
use lineage_testkit::NatsServer;

async fn three(server: &NatsServer, dirs: &[tempfile::TempDir]) -> Vec<RegistryNode> {
    let mut nodes = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        nodes.push(start(server, config(i as u64 + 1, &path(d))).await);
    }
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g1_g3_three_voters_failover_loses_no_acknowledged_write_and_retry_applies_once() {
    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(3);
    let mut nodes = three(&server, &dirs).await;
    assert!(nodes[0].initialize(members(&[1, 2, 3])).await.unwrap());
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    let leader = agreed_leader(&refs, Duration::from_secs(5)).await;

    // A hosting node that does not vote: its own NATS connection, only the client.
    let client = RegistryClient::new(connect(&server).await, CLUSTER);
    let root = root_header(1);
    assert_eq!(
        client
            .register_session(
                rid("reg-1"),
                1,
                root.clone(),
                NewSession {
                    node: Some(node_id(9)),
                    ..Default::default()
                }
            )
            .await
            .unwrap(),
        0
    );
    confirm(&client, 1, node_id(9), 1).await;
    let mut acknowledged = vec![sid(1)];
    for n in 2..22 {
        let depth = client
            .register_session(
                rid(format!("reg-{n}")),
                n as u64,
                child_header(&root, n),
                NewSession::default(),
            )
            .await
            .unwrap();
        assert_eq!(depth, 1);
        acknowledged.push(sid(n));
    }
    // A placement claim (CAS): epoch 1 -> 2.
    let claim = || client.claim_placement(rid("claim-1"), 50, sid(1), node_id(7), 1);
    assert_eq!(claim().await.unwrap().epoch, 2);

    // Kill the leader: a new leader within 2 s.
    let idx = nodes.iter().position(|n| n.raft_id() == leader).unwrap();
    let old = nodes.remove(idx);
    let stopped = Instant::now();
    old.shutdown().await.unwrap();
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    let refs = &refs;
    let new_leader = wait_for_async(Duration::from_secs(2), "a new leader", || async move {
        let l = refs[0].raft_metrics().current_leader;
        let ok = l.is_some_and(|l| l != leader)
            && refs.iter().all(|n| n.raft_metrics().current_leader == l);
        l.filter(|_| ok)
    })
    .await;
    let elapsed = stopped.elapsed();
    assert!(
        elapsed < Duration::from_secs(2),
        "new leader after {elapsed:?}"
    );
    assert_ne!(new_leader, leader);

    // No acknowledged write lost (linearizable reads through the new leader).
    for id in &acknowledged {
        let rec = client
            .session(id.clone(), Consistency::Linearizable)
            .await
            .unwrap();
        assert!(rec.is_some(), "acknowledged session {id} lost");
    }
    assert_eq!(
        client
            .subtree(sid(1), Consistency::Linearizable)
            .await
            .unwrap()
            .len(),
        21
    );
    // Read in small pages: the same sessions, in the same order, parents first.
    let whole = client
        .subtree(sid(1), Consistency::Linearizable)
        .await
        .unwrap();
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let (page, next) = client
            .subtree_page(sid(1), after, 4, Consistency::Linearizable)
            .await
            .unwrap();
        assert!(!page.is_empty() && page.len() <= 4);
        paged.extend(page);
        match next {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
    }
    assert_eq!(paged, whole);
    assert_eq!(paged[0].id(), &sid(1));
    // The retried claim (same request id) returns the first result: applied once, epoch stays 2.
    assert_eq!(claim().await.unwrap().epoch, 2);
    let rec = client
        .session(sid(1), Consistency::Linearizable)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.placement.unwrap().epoch, 2);
    // Writes go on with a minority lost.
    client
        .register_session(
            rid("reg-after"),
            99,
            child_header(&root, 40),
            NewSession::default(),
        )
        .await
        .unwrap();
    assert!(client
        .is_ancestor(sid(1), sid(40), Consistency::Linearizable)
        .await
        .unwrap());
    let status = client.status(Consistency::Linearizable).await.unwrap();
    assert_eq!(status.leader, Some(new_leader));
    assert_eq!(status.voters, vec![1, 2, 3]);
    let last = status.last_applied.unwrap();
    all_applied(refs, last, Duration::from_secs(5)).await;
    assert_eq!(
        nodes[0].state_digest().unwrap(),
        nodes[1].state_digest().unwrap()
    );
    // Stale reads are served by any member.
    assert!(client.session(sid(40), Consistency::Stale).await.is_ok());
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g3_restart_of_all_voters_keeps_identical_state_and_never_reinitializes() {
    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(3);
    let nodes = three(&server, &dirs).await;
    assert!(nodes[0].initialize(members(&[1, 2, 3])).await.unwrap());
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    agreed_leader(&refs, Duration::from_secs(5)).await;
    let client = nodes[1].client();
    let root = root_header(1);
    client
        .register_session(rid("r1"), 1, root.clone(), NewSession::default())
        .await
        .unwrap();
    confirm(&client, 1, node_id(1), 0).await;
    for n in 2..32 {
        client
            .register_session(
                rid(format!("r{n}")),
                n as u64,
                child_header(&root, n),
                NewSession::default(),
            )
            .await
            .unwrap();
    }
    client
        .heartbeat(rid("hb"), 100, node_id(1), 5000, Some("addr".into()))
        .await
        .unwrap();
    client
        .close_admission(rid("close"), 101, vec![sid(2)])
        .await
        .unwrap();
    let last = client
        .status(Consistency::Linearizable)
        .await
        .unwrap()
        .last_applied
        .unwrap();
    all_applied(&refs, last, Duration::from_secs(5)).await;
    let digest = nodes[0].state_digest().unwrap();
    for n in &nodes {
        assert_eq!(n.state_digest().unwrap(), digest);
    }
    for n in nodes {
        n.shutdown().await.unwrap();
    }

    // Restart from the same directories.
    let nodes = three(&server, &dirs).await;
    for n in &nodes {
        assert!(
            !n.initialize(members(&[1, 2, 3])).await.unwrap(),
            "a restarted node re-initialized"
        );
    }
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    agreed_leader(&refs, Duration::from_secs(5)).await;
    all_applied(&refs, last, Duration::from_secs(5)).await;
    for n in &nodes {
        assert_eq!(
            n.state_digest().unwrap(),
            digest,
            "state differs after restart on {}",
            n.raft_id()
        );
    }
    let client = nodes[2].client();
    assert_eq!(
        client.digest(Consistency::Linearizable).await.unwrap(),
        digest
    );
    // The idempotency table survived too: a retry returns the first result.
    assert_eq!(
        client
            .register_session(rid("r5"), 5, child_header(&root, 5), NewSession::default())
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        client.digest(Consistency::Linearizable).await.unwrap(),
        digest
    );
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g3_wiped_voter_rejoins_and_catches_up_by_chunked_snapshot() {
    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(3);
    let small = |id: u64, d: &tempfile::TempDir| {
        let mut c = config(id, &path(d));
        c.snapshot_commands_since_last = 50;
        c.max_in_snapshot_log_to_keep = 0;
        c.snapshot_chunk_bytes = Some(2048); // many chunks: exercises the chunked transfer
        c
    };
    let mut nodes = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        nodes.push(start(&server, small(i as u64 + 1, d)).await);
    }
    nodes[0].initialize(members(&[1, 2, 3])).await.unwrap();
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    let leader = agreed_leader(&refs, Duration::from_secs(5)).await;
    let client = nodes[0].client();
    let root = root_header(1);
    client
        .register_session(rid("r1"), 1, root.clone(), NewSession::default())
        .await
        .unwrap();
    confirm(&client, 1, node_id(1), 0).await;
    // Writes in parallel so they batch.
    let mut tasks = Vec::new();
    for n in 2..130u32 {
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

    // Pick a follower to wipe.
    let victim_idx = nodes.iter().position(|n| n.raft_id() != leader).unwrap();
    let victim_id = nodes[victim_idx].raft_id();
    let victim = nodes.remove(victim_idx);
    victim.shutdown().await.unwrap();
    let leader_node = nodes.iter().find(|n| n.raft_id() == leader).unwrap();
    leader_node.remove_member(victim_id).await.unwrap();
    // Make sure the leader has a snapshot of everything and purged the log behind it (the
    // members batch concurrent writes, so 129 commands take fewer log entries).
    let applied = leader_node.raft_metrics().last_applied.unwrap().index;
    leader_node.raft().trigger().snapshot().await.unwrap();
    wait_for_async(
        Duration::from_secs(5),
        "leader snapshot and purge",
        || async {
            let m = leader_node.raft_metrics();
            m.snapshot.is_some_and(|s| s.index >= applied)
                && m.purged.is_some_and(|p| p.index >= applied)
        },
    )
    .await;

    std::fs::remove_dir_all(path(&dirs[victim_idx])).unwrap();
    let fresh = start(&server, small(victim_id, &dirs[victim_idx])).await;
    leader_node
        .add_learner(victim_id, node_id(victim_id), true)
        .await
        .unwrap();
    leader_node
        .change_membership([1, 2, 3].into(), false)
        .await
        .unwrap();
    let last = leader_node.raft_metrics().last_applied.unwrap().index;
    all_applied(&[&fresh], last, Duration::from_secs(10)).await;
    let m = fresh.raft_metrics();
    assert!(
        m.snapshot.is_some(),
        "the wiped voter should have installed a snapshot"
    );
    assert_eq!(
        fresh.state_digest().unwrap(),
        leader_node.state_digest().unwrap()
    );
    assert_eq!(fresh.local_state().unwrap().session_count(), 129);
    let f = fresh.store_stats().figures();
    assert!(
        f.installed_total >= 1 && f.install_bytes > 0,
        "the store counts the install: {f:?}"
    );
    assert_eq!(m.membership_config.membership().voter_ids().count(), 3);
    fresh.shutdown().await.unwrap();
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g1_concurrent_writes_share_log_entries_and_each_gets_its_own_answer() {
    use lineage_registry::{Command, CommandResponse, RegistryRefusal};

    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(3);
    let nodes = three(&server, &dirs).await;
    assert!(nodes[0].initialize(members(&[1, 2, 3])).await.unwrap());
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    let leader = agreed_leader(&refs, Duration::from_secs(5)).await;
    let leader_node = nodes.iter().find(|n| n.raft_id() == leader).unwrap();
    let client = nodes[0].client();
    let root = root_header(1);
    client
        .register_session(rid("r1"), 1, root.clone(), NewSession::default())
        .await
        .unwrap();
    confirm(&client, 1, node_id(1), 0).await;
    let before = leader_node.raft_metrics().last_log_index.unwrap();

    // 64 children, each sent twice at once (same request id), plus orphans that are refused.
    let register = |n: u32, header| Command::RegisterSession {
        request_id: rid(format!("r{n}")),
        at_ms: u64::from(n),
        header,
        descriptor: None,
        max_depth: None,
        fan_out: Default::default(),
        budget: None,
        node: None,
        run: None,
        start_within_ms: None,
        hosted: false,
    };
    let mut tasks = Vec::new();
    for n in 2..66u32 {
        let cmd = register(n, child_header(&root, n));
        for _ in 0..2 {
            let (client, cmd) = (client.clone(), cmd.clone());
            tasks.push(tokio::spawn(async move { (n, client.write(&cmd).await) }));
        }
    }
    let orphan_parent = child_header(&root_header(900), 901);
    for n in 1000..1004u32 {
        let cmd = register(n, child_header(&orphan_parent, n));
        let client = client.clone();
        tasks.push(tokio::spawn(async move { (n, client.write(&cmd).await) }));
    }
    for t in tasks {
        let (n, answer) = t.await.unwrap();
        let answer = answer.unwrap();
        if n >= 1000 {
            assert!(
                matches!(
                    answer,
                    CommandResponse::Refused(RegistryRefusal::ParentMissing { .. })
                ),
                "{n}: {answer:?}"
            );
        } else {
            assert_eq!(
                answer,
                CommandResponse::Registered {
                    session: sid(n),
                    depth: 1
                },
                "{n}"
            );
        }
    }
    // 132 commands, far fewer entries: they were group-committed.
    let after = leader_node.raft_metrics().last_log_index.unwrap();
    assert!(
        after - before < 132,
        "{} entries for 132 commands",
        after - before
    );
    all_applied(&refs, after, Duration::from_secs(5)).await;
    let digest = leader_node.state_digest().unwrap();
    for n in &nodes {
        assert_eq!(n.state_digest().unwrap(), digest);
        assert_eq!(n.local_state().unwrap().session_count(), 65);
    }
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}
