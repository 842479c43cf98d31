//! K1, X1 (issue 12, found by CI's `lineage chaos` seed 12): a live agent whose session is
//! disposed in the registry while its node holds its lease stops within about a lease. Before,
//! only a lease lapse made a node check its agents' records, so an agent whose record was
//! disposed behind its node's back (a birth whose `start` answered after the parent's node had
//! given up and disposed it; a drain that disposed it in the registry alone) ran on until its
//! next registry write was refused: a long turn to its end. Now every live agent's record is
//! read once per lease (`sweeps.rs`); past `READ_EACH_UP_TO` live agents, in one walk of the
//! node's placements instead of a read per agent.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lineage_core::ids::RequestId;
use lineage_host::fence::READ_EACH_UP_TO;
use lineage_host::{Host, HostDeps, RegistryPort, ScriptDrivers, SystemClock};
use lineage_registry::types::{Command, CommandResponse};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k1_x1_an_agent_whose_session_is_disposed_behind_its_node_stops_within_a_lease() {
    let cluster = MemCluster::start();
    let a = cluster.host("node-a").await;
    let (_root, child) = root_and_continuable_child(
        &a,
        r#"{"turns": [[{"do": "sleep", "ms": 60000}, {"do": "reply", "content": "late"}]]}"#,
        "go",
    )
    .await;
    cluster.first_turn_started(&child).await;
    assert!(a.is_live(&child), "the child's agent runs its long turn");

    // Disposed in the registry alone: node-a is not told, and its lease never lapses.
    let disposed = cluster
        .registry
        .write(Command::Dispose {
            stop_reason: None,
            request_id: RequestId::parse("0190abcd-0000-7000-8000-00000000d15e").unwrap(),
            at_ms: 1,
            session: child.clone(),
        })
        .await
        .expect("the registry answers");
    assert!(
        !matches!(disposed, CommandResponse::Refused(_)),
        "{disposed:?}"
    );

    // The lease is 3 s: checked within one, with room for a slow machine.
    wait_for_async(
        Duration::from_secs(8),
        "node-a's agent of the disposed child stopped",
        || async { !a.is_live(&child) },
    )
    .await;
}

/// Past `READ_EACH_UP_TO` live agents, a reconcile reads the node's placements in one walk a
/// lease, not one record per agent, and still stops exactly the agent whose session was
/// disposed behind the node's back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k1_x1_past_32_live_agents_one_walk_a_lease_stops_exactly_the_disposed_one() {
    let cluster = MemCluster::start();
    let counting = ObservedRegistry::over(cluster.registry.clone());
    let cfg = host_config("node-a");
    let a = Host::start(
        cfg,
        HostDeps::with_ports(
            lineage_bus::BusPorts::memory(&cluster.bus),
            Arc::new(counting.clone()) as Arc<dyn RegistryPort>,
            Arc::new(SystemClock),
            Arc::new(ScriptDrivers),
        ),
        CancellationToken::new(),
    )
    .await
    .expect("host");
    let long_turn =
        r#"{"turns": [[{"do": "sleep", "ms": 60000}, {"do": "reply", "content": "late"}]]}"#;
    let (root, first) = root_and_continuable_child(&a, long_turn, "go").await;
    let mut children = vec![first];
    while children.len() < READ_EACH_UP_TO + 8 {
        let child = a
            .spawn(child_request(
                &root,
                lineage_core::descriptor::SubagentShape::Continuable,
                script(long_turn),
                "go",
            ))
            .await
            .expect("child");
        children.push(child.session);
    }
    for child in &children {
        wait_for_async(Duration::from_secs(20), "every child live", || async {
            a.is_live(child)
        })
        .await;
    }

    let target = children[READ_EACH_UP_TO / 2].clone();
    let disposed = cluster
        .registry
        .write(Command::Dispose {
            stop_reason: None,
            request_id: RequestId::parse("0190abcd-0000-7000-8000-00000000d15f").unwrap(),
            at_ms: 1,
            session: target.clone(),
        })
        .await
        .expect("the registry answers");
    assert!(
        !matches!(disposed, CommandResponse::Refused(_)),
        "{disposed:?}"
    );
    let reads_before = counting.session_reads();
    let walks_before = counting.node_walks();
    wait_for_async(
        Duration::from_secs(8),
        "node-a's agent of the disposed child stopped",
        || async { !a.is_live(&target) },
    )
    .await;
    assert!(
        counting.node_walks() > walks_before,
        "the placements were read in a walk"
    );
    let reads = counting.session_reads() - reads_before;
    assert!(
        reads < READ_EACH_UP_TO,
        "{reads} record reads while {} agents were checked: not one per agent",
        children.len() + 1
    );
    for child in children.iter().filter(|c| **c != target) {
        assert!(a.is_live(child), "{child} was not disposed and still runs");
    }
    assert!(a.is_live(&root));
}
