//! Shared helpers for the cluster tests: real nats-server, real redb files in temp dirs.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId};
use lineage_registry::{RegistryNode, RegistryNodeConfig};
#[allow(unused_imports)]
pub use lineage_testkit::wait_for_async;
use lineage_testkit::NatsServer;

pub const CLUSTER: &str = "test";

pub use lineage_core::ids::sid;
pub fn rid(s: impl AsRef<str>) -> RequestId {
    RequestId::parse(s.as_ref()).unwrap()
}
pub fn node_id(raft_id: u64) -> NodeId {
    NodeId::parse(&format!("node-{raft_id}")).unwrap()
}
/// Confirms the start of session `n` as `node` (a birth is `starting` until then, and a
/// `starting` parent takes no children).
pub async fn confirm(
    client: &lineage_registry::RegistryClient,
    n: u32,
    node: NodeId,
    expected_epoch: u64,
) {
    client
        .confirm_start(rid(format!("start-{n}")), 1, sid(n), node, expected_epoch)
        .await
        .unwrap();
}

pub fn root_header(n: u32) -> SessionHeader {
    SessionHeader::top_level(sid(n), None, None)
}
pub fn child_header(parent: &SessionHeader, n: u32) -> SessionHeader {
    let depth = parent.delegation_depth().unwrap_or(0) + 1;
    child_session_meta(parent, sid(n), depth, 0, None).unwrap()
}

pub async fn connect(server: &NatsServer) -> async_nats::Client {
    let url = &server.url();
    wait_for_async(
        Duration::from_secs(2),
        format_args!("a connection to {url}"),
        || async move { async_nats::connect(url).await },
    )
    .await
}

pub fn config(raft_id: u64, dir: &Path) -> RegistryNodeConfig {
    RegistryNodeConfig::new(CLUSTER, raft_id, node_id(raft_id), dir.to_path_buf()).fast()
}

pub async fn start(server: &NatsServer, cfg: RegistryNodeConfig) -> RegistryNode {
    RegistryNode::start(cfg, connect(server).await)
        .await
        .unwrap()
}

/// One voter on `dir`, its group initialized with itself alone, leading.
pub async fn one_voter(server: &NatsServer, dir: &Path) -> RegistryNode {
    let node = start(server, config(1, dir)).await;
    assert!(node.initialize(members(&[1])).await.unwrap());
    agreed_leader(&[&node], Duration::from_secs(5)).await;
    node
}

pub fn members(ids: &[u64]) -> BTreeMap<u64, NodeId> {
    ids.iter().map(|id| (*id, node_id(*id))).collect()
}

/// The leader all `nodes` agree on, once they do.
pub async fn agreed_leader(nodes: &[&RegistryNode], timeout: Duration) -> u64 {
    wait_for_async(timeout, "an agreed leader", || async move {
        let seen: Vec<Option<u64>> = nodes
            .iter()
            .map(|n| n.raft_metrics().current_leader)
            .collect();
        let ok = seen.iter().all(|l| l.is_some() && *l == seen[0])
            && seen[0].is_some_and(|l| nodes.iter().any(|n| n.raft_id() == l));
        seen[0].filter(|_| ok)
    })
    .await
}

/// Waits until every node applied at least `index`.
pub async fn all_applied(nodes: &[&RegistryNode], index: u64, timeout: Duration) {
    wait_for_async(
        timeout,
        format_args!("all nodes applied {index}"),
        || async move {
            nodes.iter().all(|n| {
                n.raft_metrics()
                    .last_applied
                    .is_some_and(|l| l.index >= index)
            })
        },
    )
    .await;
}

pub fn tempdirs(n: usize) -> Vec<tempfile::TempDir> {
    (0..n).map(|_| tempfile::tempdir().unwrap()).collect()
}

pub fn path(d: &tempfile::TempDir) -> PathBuf {
    d.path().join("registry")
}

/// `n` free loopback addresses (bound, read, released): the direct Raft links' listeners.
pub fn free_addrs(n: usize) -> Vec<std::net::SocketAddr> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// Member `me`'s direct Raft links (no TLS) in a group listening on `addrs` (member i + 1 on
/// `addrs[i]`), proving `token`.
pub fn direct_links(
    me: u64,
    addrs: &[std::net::SocketAddr],
    token: &str,
) -> lineage_registry::DirectRaft {
    lineage_registry::DirectRaft {
        listen: addrs[me as usize - 1],
        peers: addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (i as u64 + 1, a.to_string()))
            .collect(),
        token: lineage_registry::RaftToken::new(token.as_bytes()).unwrap(),
        tls: None,
    }
}
