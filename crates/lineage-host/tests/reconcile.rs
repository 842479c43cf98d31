//! K1, X1 (issue 12, found by CI's `lineage chaos` seed 12): a live agent whose session is
//! disposed in the registry while its node holds its lease stops within about a lease. Before,
//! only a lease lapse made a node check its agents' records, so an agent whose record was
//! disposed behind its node's back (a birth whose `start` answered after the parent's node had
//! given up and disposed it; a drain that disposed it in the registry alone) ran on until its
//! next registry write was refused: a long turn to its end. Now every live agent's record is
//! read once per lease (`sweeps.rs`).

mod common;

use std::time::Duration;

use common::*;
use lineage_core::ids::RequestId;
use lineage_host::RegistryPort;
use lineage_registry::types::{Command, CommandResponse};

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
    wait_for_async(
        Duration::from_secs(10),
        "the child's turn under way",
        || async { count_kind(&cluster.log(&child).await, "turn/start") == 1 },
    )
    .await;
    assert!(a.is_live(&child), "the child's agent runs its long turn");

    // Disposed in the registry alone: node-a is not told, and its lease never lapses.
    let disposed = cluster
        .registry
        .write(Command::Dispose {
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
