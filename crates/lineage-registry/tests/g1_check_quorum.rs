//! G1 (liveness of the registry): check-quorum must not deadlock a two-member quorum.
//!
//! Seen in CI (`bench_smoke`, the scale bench's catch-up with one of three voters killed): the
//! leader lost its one remaining follower's acknowledgements for a moment and stood aside; the
//! follower, its election timer expired, asked for votes, but its log was shorter than the
//! leader's (entries the leader had appended and could not commit), so the leader refused every
//! vote and, refusing, kept its own term; standing aside, it sent nothing that would tell it of
//! the newer term. No leader for the rest of the run.
//!
//! Reproduced here deterministically, in one process over a real nats-server with real redb
//! files: three voters; one is shut down for good; the other follower is shut down while the
//! leader takes a write it cannot commit (its log grows past the follower's) and stands aside;
//! the follower starts again from its disk. The registry must elect a leader and take writes
//! again (the leader probes after standing aside, learns of the newer term and steps down).

mod common;

use std::time::Duration;

use common::*;
use lineage_registry::client::NewSession;
use lineage_registry::raft_types::millis_since_quorum_ack;
use lineage_registry::{RegistryClient, RegistryNode};
use lineage_testkit::NatsServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g1_a_leader_standing_aside_with_a_longer_log_than_its_candidate_does_not_deadlock() {
    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(3);
    let mut nodes = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        nodes.push(Some(start(&server, config(i as u64 + 1, &path(d))).await));
    }
    assert!(nodes[0]
        .as_ref()
        .unwrap()
        .initialize(members(&[1, 2, 3]))
        .await
        .unwrap());
    let refs: Vec<&RegistryNode> = nodes.iter().flatten().collect();
    let leader = agreed_leader(&refs, Duration::from_secs(5)).await;
    let client = RegistryClient::new(connect(&server).await, CLUSTER);
    let root = root_header(1);
    client
        .register_session(
            rid("root"),
            1,
            root.clone(),
            NewSession {
                node: Some(node_id(9)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    confirm(&client, 1, node_id(9), 1).await;
    let li = (leader - 1) as usize;
    let followers: Vec<usize> = (0..3).filter(|i| *i != li).collect();
    let (gone, back) = (followers[0], followers[1]);

    // One follower down for good, the other down for a while: the leader is alone.
    nodes[gone].take().unwrap().shutdown().await.unwrap();
    let back_raft_id = nodes[back].as_ref().unwrap().raft_id();
    nodes[back].take().unwrap().shutdown().await.unwrap();
    let lead = nodes[li].as_ref().unwrap();
    let before = lead.raft_metrics().last_log_index.unwrap_or(0);

    // A write it cannot commit: appended to the leader's log only. The client gives up.
    let pending = {
        let client = client.clone();
        let header = child_header(&root, 2);
        tokio::spawn(async move {
            client
                .register_session(rid("uncommitted"), 2, header, NewSession::default())
                .await
        })
    };
    let lead_ref = &lead;
    wait_for_async(
        Duration::from_secs(5),
        "the leader's log past the stopped follower's",
        || async move { lead_ref.raft_metrics().last_log_index.unwrap_or(0) > before },
    )
    .await;
    // Without a quorum's acknowledgement for twice the election timeout it stands aside.
    wait_for_async(
        Duration::from_secs(5),
        "the leader without a quorum for a while",
        || async move {
            millis_since_quorum_ack(&lead_ref.raft_metrics()).is_some_and(|ms| ms > 1_000)
        },
    )
    .await;

    // The follower comes back with the shorter log.
    let d = &dirs[back];
    nodes[back] = Some(start(&server, config(back_raft_id, &path(d))).await);
    let refs: Vec<&RegistryNode> = nodes.iter().flatten().collect();
    let refs = &refs;
    let elected = wait_for_async(
        Duration::from_secs(20),
        "a leader both live members agree on and that has heard its quorum",
        || async move {
            let l = refs[0].raft_metrics().current_leader;
            let agreed = l.is_some() && refs.iter().all(|n| n.raft_metrics().current_leader == l);
            let heard = refs.iter().any(|n| {
                Some(n.raft_id()) == l
                    && millis_since_quorum_ack(&n.raft_metrics()).is_some_and(|ms| ms < 500)
            });
            l.filter(|_| agreed && heard)
        },
    )
    .await;
    assert!(elected == leader || elected == back_raft_id);

    // Writes again: a new one, and the one the client gave up on, retried with its request id
    // (applied at most once, whether or not the old leader's entry survived).
    client
        .register_session(
            rid("after"),
            3,
            child_header(&root, 3),
            NewSession::default(),
        )
        .await
        .unwrap();
    let _ = pending.await;
    client
        .register_session(
            rid("uncommitted"),
            2,
            child_header(&root, 2),
            NewSession::default(),
        )
        .await
        .unwrap();

    for node in nodes.into_iter().flatten() {
        node.shutdown().await.unwrap();
    }
}
