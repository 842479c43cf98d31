//! G2, L2, D3, X1: bad input through the client's wire path is refused, each with its own
//! error, and leaves the state digest unchanged. A group of one voter.

mod common;

use std::time::Duration;

use common::*;
use lineage_core::depth::MaxDepth;
use lineage_registry::client::NewSession;
use lineage_registry::{
    CommandResponse, Consistency, RegistryError, RegistryNode, RegistryRefusal,
};
use lineage_testkit::NatsServer;
use serde_json::{json, Value};

fn register(req: &str, header: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "cmd": "register_session", "request_id": req, "at_ms": 7, "header": header,
    }))
    .unwrap()
}

fn child(id: u32, parent: u32, root: u32, depth: Value) -> Value {
    json!({
        "id": sid(id).as_str(), "parent_session": sid(parent).as_str(),
        "root_session": sid(root).as_str(), "origin": "subagent", "delegation_depth": depth,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g2_l2_d3_x1_bad_input_is_refused_with_its_own_error_and_state_unchanged() {
    let server = NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = one_voter(&server, &path(&dir)).await;
    let client = lineage_registry::RegistryClient::new(connect(&server).await, CLUSTER);

    // Root 1 (max depth 2) with child 2 and grandchild 3; root 4 disposed; root 5 drained.
    let root = root_header(1);
    let max = NewSession {
        limits: lineage_core::limits::BirthLimits {
            max_depth: Some(MaxDepth::new(2).unwrap()),
            ..Default::default()
        },
        ..Default::default()
    };
    client
        .register_session(rid("a1"), 1, root.clone(), max)
        .await
        .unwrap();
    confirm(&client, 1, node_id(1), 0).await;
    let c2 = child_header(&root, 2);
    client
        .register_session(rid("a2"), 2, c2.clone(), NewSession::default())
        .await
        .unwrap();
    confirm(&client, 2, node_id(1), 0).await;
    client
        .register_session(rid("a3"), 3, child_header(&c2, 3), NewSession::default())
        .await
        .unwrap();
    confirm(&client, 3, node_id(1), 0).await;
    client
        .register_session(rid("a4"), 4, root_header(4), NewSession::default())
        .await
        .unwrap();
    assert!(!client.dispose(rid("a4d"), 5, sid(4)).await.unwrap());
    client
        .register_session(rid("a5"), 6, root_header(5), NewSession::default())
        .await
        .unwrap();
    confirm(&client, 5, node_id(1), 0).await;
    client
        .close_admission(rid("a5c"), 7, vec![sid(5)])
        .await
        .unwrap();
    let digest = client.digest(Consistency::Linearizable).await.unwrap();

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "origin fork",
            register(
                "b1",
                json!({"id": sid(10).as_str(), "parent_session": sid(1).as_str(), "root_session": sid(1).as_str(), "origin": "fork", "delegation_depth": 1}),
            ),
            "invalid_header:origin",
        ),
        (
            "depth -1",
            register("b2", child(11, 1, 1, json!(-1))),
            "invalid_header:delegation_depth",
        ),
        (
            "depth 2^53",
            register("b3", child(12, 1, 1, json!(9007199254740992u64))),
            "invalid_header:delegation_depth",
        ),
        (
            "missing parent",
            register("b4", child(13, 99, 99, json!(1))),
            "parent_missing",
        ),
        (
            "disposed parent",
            register("b5", child(14, 4, 4, json!(1))),
            "parent_disposed",
        ),
        (
            "closed subtree",
            register("b6", child(15, 5, 5, json!(1))),
            "admission_closed",
        ),
        (
            "duplicate id",
            register("b7", child(2, 1, 1, json!(1))),
            "duplicate_session",
        ),
        (
            "own parent (cycle)",
            register("b8", child(16, 16, 1, json!(1))),
            "invalid_header:parent_session",
        ),
        (
            "depth over max",
            register("b9", child(17, 3, 1, json!(3))),
            "depth_exceeded",
        ),
        (
            "depth not parent + 1",
            register("b10", child(18, 1, 1, json!(2))),
            "depth_mismatch",
        ),
        (
            "wrong root",
            register("b11", child(19, 2, 4, json!(2))),
            "root_mismatch",
        ),
        ("not json", b"{not json".to_vec(), "malformed"),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (what, payload, want) in cases {
        let resp = client.write_raw(payload).await.unwrap();
        let CommandResponse::Refused(refusal) = resp else {
            panic!("{what}: accepted: {resp:?}");
        };
        let got = match &refusal {
            RegistryRefusal::InvalidHeader { field, .. } => format!("invalid_header:{field}"),
            other => other.kind().to_owned(),
        };
        assert_eq!(got, want, "{what}: {refusal}");
        let msg = refusal.to_string();
        assert!(!msg.contains('\n'), "{what}: one line: {msg}");
        seen.insert(msg);
        assert_eq!(
            client.digest(Consistency::Linearizable).await.unwrap(),
            digest,
            "{what} changed the state"
        );
    }
    assert_eq!(seen.len(), 12, "every refusal has its own message");

    // Typed methods surface refusals as RegistryError::Refused.
    let err = client.dispose(rid("c1"), 9, sid(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Refused(RegistryRefusal::UndisposedChildren { .. })
        ),
        "{err}"
    );
    assert_eq!(
        client.digest(Consistency::Linearizable).await.unwrap(),
        digest
    );
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g1_client_without_voters_fails_with_unavailable_not_a_hang() {
    let server = NatsServer::start().unwrap();
    let client = lineage_registry::RegistryClient::new(connect(&server).await, CLUSTER)
        .with_deadline(Duration::from_millis(300));
    let err = client
        .session(sid(1), Consistency::Stale)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Unavailable { .. } | RegistryError::Timeout { .. }
        ),
        "{err}"
    );
    assert!(!err.to_string().contains('\n'));
    let _unused: Option<RegistryNode> = None;
}
