//! One conformance suite for every `RegistryPort`: the in-memory registry and the real client
//! must agree on what the host relies on (register, CAS claim, admission, dispose order, leases).

mod common;

use std::sync::Arc;

use common::*;
use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{RequestId, SessionId};
use lineage_host::{HostError, IdMint, ManualClock, MemoryRegistry, RegistryPort};
use lineage_registry::types::{Command, CommandResponse, RegistryRefusal};

async fn suite(port: &dyn RegistryPort) {
    let mint = IdMint::new(Arc::new(ManualClock::new(1_700_000_000_000)));
    let rid = || -> RequestId { mint.request() };
    let root_id: SessionId = mint.session();
    let root = SessionHeader::top_level(root_id.clone(), None, None);
    let register = |header: SessionHeader, request_id: RequestId| Command::RegisterSession {
        request_id,
        at_ms: 1,
        header,
        descriptor: None,
        max_depth: None,
        fan_out: Default::default(),
        budget: None,
        node: Some(node("node-a")),
        run: None,
        start_within_ms: Some(1_000),
        hosted: false,
    };
    let confirm = |session: &SessionId, request_id: RequestId| Command::ConfirmStart {
        request_id,
        at_ms: 1,
        session: session.clone(),
        node: node("node-a"),
        expected_epoch: 1,
    };
    let first = rid();
    port.write(register(root.clone(), first.clone()))
        .await
        .unwrap();
    // Idempotent by request id.
    let again = port.write(register(root.clone(), first)).await.unwrap();
    assert!(matches!(again, CommandResponse::Registered { .. }));
    let child_id = mint.session();
    let child = child_session_meta(&root, child_id.clone(), 1, 0, None).unwrap();
    // A `starting` parent takes no child; once its node confirmed the start, it does.
    let early = port
        .write(register(child.clone(), rid()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            early,
            HostError::Refused(RegistryRefusal::NotStarted { .. })
        ),
        "{early:?}"
    );
    assert!(port.overdue_births(1_000, 10).await.unwrap().is_empty());
    assert_eq!(port.overdue_births(1_001, 10).await.unwrap().len(), 1);
    port.write(confirm(&root_id, rid())).await.unwrap();
    assert!(port.overdue_births(1_001, 10).await.unwrap().is_empty());
    port.write(register(child, rid())).await.unwrap();
    port.write(confirm(&child_id, rid())).await.unwrap();
    assert!(port
        .is_ancestor(root_id.clone(), child_id.clone())
        .await
        .unwrap());
    assert!(!port
        .is_ancestor(child_id.clone(), root_id.clone())
        .await
        .unwrap());
    assert_eq!(port.subtree(root_id.clone()).await.unwrap().len(), 2);
    assert_eq!(
        port.sessions_on_node(node("node-a")).await.unwrap().len(),
        2
    );

    // CAS on the epoch: one winner.
    let claim = |expected_epoch| Command::ClaimPlacement {
        request_id: mint.request(),
        at_ms: 2,
        session: child_id.clone(),
        node: node("node-b"),
        expected_epoch,
        run: None,
        activate: false,
    };
    assert!(port.write(claim(1)).await.is_ok());
    let lost = port.write(claim(1)).await.unwrap_err();
    assert!(
        matches!(
            lost,
            HostError::Refused(RegistryRefusal::EpochMismatch { .. })
        ),
        "{lost:?}"
    );

    // Dispose refused while a child is undisposed; admission closed refuses new children.
    let refused = port
        .write(Command::Dispose {
            stop_reason: None,
            request_id: rid(),
            at_ms: 3,
            session: root_id.clone(),
        })
        .await
        .unwrap_err();
    assert!(matches!(
        refused,
        HostError::Refused(RegistryRefusal::UndisposedChildren { .. })
    ));
    port.write(Command::CloseAdmission {
        request_id: rid(),
        at_ms: 3,
        roots: vec![root_id.clone()],
    })
    .await
    .unwrap();
    let late = child_session_meta(&root, mint.session(), 1, 0, None).unwrap();
    let closed = port.write(register(late, rid())).await.unwrap_err();
    assert!(matches!(
        closed,
        HostError::Refused(RegistryRefusal::AdmissionClosed { .. })
    ));
    // Several commands in one write: in order, each on its own. The root first is refused
    // (its child is undisposed), the child's dispose then lets the root's second one through.
    let dispose = |session: &SessionId, at_ms| Command::Dispose {
        stop_reason: None,
        request_id: rid(),
        at_ms,
        session: session.clone(),
    };
    let outcomes = port
        .write_many(vec![
            dispose(&root_id, 4),
            dispose(&child_id, 4),
            dispose(&root_id, 5),
        ])
        .await
        .unwrap();
    assert!(
        matches!(
            &outcomes[..],
            [
                Err(HostError::Refused(
                    RegistryRefusal::UndisposedChildren { .. }
                )),
                Ok(CommandResponse::Disposed { already: false, .. }),
                Ok(CommandResponse::Disposed { already: false, .. }),
            ]
        ),
        "{outcomes:?}"
    );
    // A recent read answers the record too (one member here, so as last written).
    let recent = port.session_recent(root_id.clone()).await.unwrap().unwrap();
    assert_eq!(recent.id(), &root_id);

    // Leases.
    port.write(Command::Heartbeat {
        request_id: rid(),
        at_ms: 10,
        node: node("node-z"),
        lease_ms: 100,
        info: None,
    })
    .await
    .unwrap();
    let nodes = port.nodes().await.unwrap();
    let z = nodes.iter().find(|n| n.node == node("node-z")).unwrap();
    assert_eq!(z.lease_expires_at_ms, 110);
    assert!(port.session(mint.session()).await.unwrap().is_none());
}

#[tokio::test]
async fn registry_port_suite_memory() {
    suite(&MemoryRegistry::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_port_suite_raft_client() {
    let cluster = Cluster::start().await;
    suite(&cluster.registry).await;
}
