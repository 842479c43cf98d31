//! Drain leaves first across nodes (X1, H2) and interrupt authority (M4).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use lineage_core::authority::InterruptAuthority;
use lineage_core::descriptor::SubagentShape;
use lineage_core::drain::verify_child_first;
use lineage_host::control::{DisposalKind, InterruptOutcome, InterruptRequest};
use lineage_host::HostError;
use lineage_registry::SessionState;

const BUSY: &str = r#"{"turns": [[{"do": "sleep", "ms": 60000}]]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn x1_drain_disposes_leaves_first_across_nodes() {
    let cluster = Cluster::start().await;
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let root = a
        .spawn(root_request(script(r#"{"turns": []}"#), "hi"))
        .await
        .unwrap();
    // root (a) -> c1 (a) -> g (b); root -> c2 (b)
    let c1 = a
        .spawn(child_request(
            &root.session,
            SubagentShape::Continuable,
            script(BUSY),
            "c1",
        ))
        .await
        .unwrap();
    let mut req = child_request(
        &root.session,
        SubagentShape::Continuable,
        script(BUSY),
        "c2",
    );
    req.node = Some(node("node-b"));
    let c2 = a.spawn(req).await.unwrap();
    let mut req = child_request(&c1.session, SubagentShape::Continuable, script(BUSY), "g");
    req.node = Some(node("node-b"));
    let g = b
        .spawn(req)
        .await
        .expect("forwarded to the node hosting c1");
    assert_eq!(g.depth, 2);
    assert!(a.is_live(&c1.session) && b.is_live(&c2.session) && b.is_live(&g.session));

    // Drain from the other node.
    let report = b.drain(vec![root.session.clone()]).await.expect("drain");
    assert_eq!(report.closed.len(), 4, "{report:?}");
    let order: Vec<_> = report
        .waves
        .iter()
        .flatten()
        .map(|d| d.session.clone())
        .collect();
    assert_eq!(order.len(), 4);
    let mut parents = BTreeMap::new();
    for id in [&c1.session, &c2.session, &g.session] {
        let record = cluster.record(id).await;
        parents.insert(id.clone(), record.header.parent_session().unwrap().clone());
    }
    verify_child_first(&order, &parents).expect("leaves first");
    assert_eq!(order.last(), Some(&root.session));
    let wave_of = |id: &lineage_core::ids::SessionId| {
        report
            .waves
            .iter()
            .position(|w| w.iter().any(|d| &d.session == id))
            .unwrap()
    };
    assert!(wave_of(&g.session) < wave_of(&c1.session));
    assert!(wave_of(&c1.session) < wave_of(&root.session));
    assert!(report
        .waves
        .iter()
        .flatten()
        .all(|d| d.kind == DisposalKind::Released));
    // Registry state: all disposed, each parent after its children (registry clock order).
    let mut at = BTreeMap::new();
    for id in [&root.session, &c1.session, &c2.session, &g.session] {
        let record = cluster.record(id).await;
        assert_eq!(record.state, SessionState::Disposed);
        at.insert(id.clone(), record.updated_at_ms);
    }
    assert!(at[&g.session] <= at[&c1.session]);
    assert!(at[&c1.session] <= at[&root.session]);
    assert!(at[&c2.session] <= at[&root.session]);
    assert!(a.status().live.is_empty() && b.status().live.is_empty());
    // Admission is closed: no new child under the drained root.
    let refused = a
        .spawn(child_request(
            &root.session,
            SubagentShape::OneShot,
            script("{}"),
            "late",
        ))
        .await;
    assert!(refused.is_err());
    // A second drain is idempotent.
    let again = a.drain(vec![root.session.clone()]).await.unwrap();
    assert!(again.waves.iter().flatten().count() == 0, "{again:?}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h2_drain_disposes_a_dead_nodes_sessions_from_the_registry() {
    let cluster = Cluster::start().await;
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let root = a
        .spawn(root_request(script(r#"{"turns": []}"#), "hi"))
        .await
        .unwrap();
    let mut req = child_request(&root.session, SubagentShape::Continuable, script(BUSY), "c");
    req.node = Some(node("node-b"));
    let c = a.spawn(req).await.unwrap();
    b.shutdown().await; // node-b dies; its lease (3 s) runs out
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let report = a.drain(vec![root.session.clone()]).await.expect("drain");
    let first = &report.waves[0][0];
    assert_eq!(first.session, c.session);
    assert_eq!(first.kind, DisposalKind::RegistryOnly);
    assert_eq!(
        cluster.record(&c.session).await.state,
        SessionState::Disposed
    );
    assert_eq!(
        cluster.record(&root.session).await.state,
        SessionState::Disposed
    );
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn m4_interrupt_is_refused_for_a_sibling_and_allowed_for_the_parent() {
    let cluster = Cluster::start().await;
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let root = a
        .spawn(root_request(script(r#"{"turns": []}"#), "hi"))
        .await
        .unwrap();
    let mut req = child_request(
        &root.session,
        SubagentShape::Continuable,
        script(BUSY),
        "s1",
    );
    req.node = Some(node("node-b"));
    let s1 = a.spawn(req).await.unwrap();
    let s2 = a
        .spawn(child_request(
            &root.session,
            SubagentShape::Continuable,
            script(BUSY),
            "s2",
        ))
        .await
        .unwrap();
    wait_for_async(Duration::from_secs(10), "s1's turn to run", || async {
        count_kind(&cluster.log(&s1.session).await, "turn/start") == 1
    })
    .await;

    let refused = a
        .interrupt(InterruptRequest {
            target: s1.session.clone(),
            authority: InterruptAuthority::Ancestor {
                session: s2.session.clone(),
            },
        })
        .await
        .unwrap_err();
    assert!(matches!(refused, HostError::Core(_)), "{refused:?}");
    let text = refused.to_string();
    assert!(text.contains("sibling"), "{text}");
    assert!(!text.contains('\n'));
    assert_eq!(refused.code(), lineage_bus::control::ErrorCode::Refused);
    let wrong_user = a
        .interrupt(InterruptRequest {
            target: s1.session.clone(),
            authority: InterruptAuthority::User {
                parent_session_id: s2.session.clone(),
            },
        })
        .await;
    assert!(wrong_user.is_err());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        count_kind(&cluster.log(&s1.session).await, "turn/end"),
        0,
        "no effect"
    );

    // The user acting for the parent may, from any node: the hosting node cancels the turn.
    let done = a
        .interrupt(InterruptRequest {
            target: s1.session.clone(),
            authority: InterruptAuthority::User {
                parent_session_id: root.session.clone(),
            },
        })
        .await
        .unwrap();
    assert_eq!(done.outcome, InterruptOutcome::Cancelled);
    assert_eq!(done.node, Some(node("node-b")));
    wait_for_async(
        Duration::from_secs(10),
        "the cancelled turn to end",
        || async {
            let log = cluster.log(&s1.session).await;
            log.iter()
                .any(|e| e.kind == "turn/end" && e.data["stop_reason"] == "interrupted")
        },
    )
    .await;
    a.shutdown().await;
    b.shutdown().await;
}
