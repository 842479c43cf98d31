//! Z2: a node's registry writes carry its identity in the subject
//! (`lineage.<cluster>.registry.write.<node>`): the serving voter refuses a heartbeat or a
//! placement claim for another node, and the state digest is unchanged. A group of one voter.

mod common;

use common::*;
use lineage_core::ids::NodeId;
use lineage_registry::client::NewSession;
use lineage_registry::{Consistency, RegistryClient, RegistryError, RegistryRefusal};
use lineage_testkit::NatsServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z2_a_worker_cannot_heartbeat_or_claim_as_another_node() {
    let server = NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _node = one_voter(&server, &path(&dir)).await;
    let nats = connect(&server).await;
    let node1 = NodeId::parse("node-1").unwrap();
    let node4 = NodeId::parse("node-4").unwrap();
    let as_node1 = RegistryClient::new(nats.clone(), CLUSTER).as_node(&node1);
    let as_node4 = RegistryClient::new(nats.clone(), CLUSTER).as_node(&node4);

    // Each node heartbeats as itself; node-1 registers a session placed on node-1.
    as_node1
        .heartbeat(rid("h1"), 10, node1.clone(), 60_000, None)
        .await
        .unwrap();
    as_node4
        .heartbeat(rid("h4"), 10, node4.clone(), 60_000, None)
        .await
        .unwrap();
    let root = root_header(1);
    as_node1
        .register_session(
            rid("r1"),
            11,
            root,
            NewSession {
                node: Some(node1.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // A forged start confirmation (node-4 confirming as node-1) is refused like a claim.
    match as_node4
        .confirm_start(rid("f0"), 11, sid(1), node1.clone(), 1)
        .await
    {
        Err(RegistryError::Refused(refusal)) => assert_eq!(refusal.kind(), "sender_mismatch"),
        other => panic!("a forged start confirmation was not refused: {other:?}"),
    }
    as_node1
        .confirm_start(rid("s1"), 11, sid(1), node1.clone(), 1)
        .await
        .unwrap();
    let digest = as_node1.digest(Consistency::Linearizable).await.unwrap();

    // node-4 forging node-1's heartbeat (say, to keep a dead node looking alive).
    match as_node4
        .heartbeat(rid("f1"), 12, node1.clone(), 60_000, None)
        .await
    {
        Err(RegistryError::Refused(RegistryRefusal::SenderMismatch { sender, node })) => {
            assert_eq!((sender.as_str(), node.as_str()), ("node-4", "node-1"));
        }
        other => panic!("a forged heartbeat was not refused: {other:?}"),
    }
    // node-4 claiming node-1's session *as node-1*.
    match as_node4
        .claim_placement(rid("f2"), 13, sid(1), node1.clone(), 1)
        .await
    {
        Err(RegistryError::Refused(refusal)) => assert_eq!(refusal.kind(), "sender_mismatch"),
        other => panic!("a forged claim was not refused: {other:?}"),
    }
    assert_eq!(
        as_node1.digest(Consistency::Linearizable).await.unwrap(),
        digest,
        "refused writes change nothing"
    );
    // Claiming as itself is a legitimate takeover (K1): accepted.
    let placed = as_node4
        .claim_placement(rid("c4"), 14, sid(1), node4.clone(), 1)
        .await
        .unwrap();
    assert_eq!(placed.node, node4);
}
