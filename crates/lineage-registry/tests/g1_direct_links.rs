//! G1, G3 on direct Raft links (issue 35): three voters whose Raft RPCs go member to member over
//! TCP, proving a shared token, with a real nats-server for everything else.
//!
//! - the group elects, commits and fails over with no Raft RPC on NATS;
//! - a member with another token is refused its links: it gets no entry and casts no vote, and
//!   the other two go on;
//! - a dialer for another cluster or member, or one that sends garbage, is refused in one line
//!   and changes nothing;
//! - with mutual TLS (a test CA made by openssl), the group commits over TLS; a member whose
//!   certificate another CA signed gets no entry, and a dialer that does not speak TLS gets
//!   nothing.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use lineage_registry::client::NewSession;
use lineage_registry::network::direct::handshake::{Hello, Reply, VERSION};
use lineage_registry::{Consistency, LinkTls, RegistryClient, RegistryNode};
use lineage_testkit::NatsServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "a registry raft token for the tests, long enough";

async fn member(
    server: &NatsServer,
    id: u64,
    dir: &tempfile::TempDir,
    addrs: &[SocketAddr],
    token: &str,
) -> RegistryNode {
    let mut cfg = config(id, &path(dir));
    cfg.direct = Some(direct_links(id, addrs, token));
    start(server, cfg).await
}

/// Counts the Raft RPCs that cross NATS in `cluster` (every member's subjects).
async fn count_raft_on_nats(server: &NatsServer) -> Arc<AtomicUsize> {
    let seen = Arc::new(AtomicUsize::new(0));
    let mut sub = connect(server)
        .await
        .subscribe(format!("lineage.{CLUSTER}.raft.>"))
        .await
        .unwrap();
    let counter = seen.clone();
    tokio::spawn(async move {
        while sub.next().await.is_some() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    seen
}

async fn register(client: &RegistryClient, n: u32) {
    client
        .register_session(
            rid(format!("reg-{n}")),
            n as u64,
            root_header(n),
            NewSession {
                node: Some(node_id(9)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g1_g3_a_group_on_direct_links_commits_and_fails_over_with_no_raft_rpc_on_nats() {
    let server = NatsServer::start().unwrap();
    let on_nats = count_raft_on_nats(&server).await;
    let (dirs, addrs) = (tempdirs(3), free_addrs(3));
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(member(&server, id, &dirs[id as usize - 1], &addrs, TOKEN).await);
    }
    assert!(nodes[0].initialize(members(&[1, 2, 3])).await.unwrap());
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    let leader = agreed_leader(&refs, Duration::from_secs(5)).await;

    let client = RegistryClient::new(connect(&server).await, CLUSTER);
    for n in 1..=20 {
        register(&client, n).await;
    }
    let applied = nodes[0].raft_metrics().last_applied.unwrap().index;
    all_applied(&refs, applied, Duration::from_secs(5)).await;

    // The leader stops: the other two elect one over their links and go on.
    let idx = nodes.iter().position(|n| n.raft_id() == leader).unwrap();
    nodes.remove(idx).shutdown().await.unwrap();
    let refs: Vec<&RegistryNode> = nodes.iter().collect();
    let new_leader = agreed_leader(&refs, Duration::from_secs(5)).await;
    assert_ne!(new_leader, leader);
    for n in 21..=25 {
        register(&client, n).await;
    }
    for n in [1, 25] {
        assert!(
            client
                .session(sid(n), Consistency::Linearizable)
                .await
                .unwrap()
                .is_some(),
            "{n}"
        );
    }
    assert_eq!(
        on_nats.load(Ordering::SeqCst),
        0,
        "Raft RPCs crossed NATS though every member has a direct link"
    );
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g1_a_member_with_another_token_is_refused_and_the_other_two_go_on() {
    let server = NatsServer::start().unwrap();
    let (dirs, addrs) = (tempdirs(3), free_addrs(3));
    let one = member(&server, 1, &dirs[0], &addrs, TOKEN).await;
    let two = member(&server, 2, &dirs[1], &addrs, TOKEN).await;
    let stranger = member(
        &server,
        3,
        &dirs[2],
        &addrs,
        "not the group's token, though long",
    )
    .await;
    assert!(one.initialize(members(&[1, 2, 3])).await.unwrap());
    let leader = agreed_leader(&[&one, &two], Duration::from_secs(5)).await;
    assert!(leader == 1 || leader == 2, "leader {leader}");

    let client = RegistryClient::new(connect(&server).await, CLUSTER);
    for n in 1..=5 {
        register(&client, n).await;
    }
    let applied = one.raft_metrics().last_applied.unwrap().index;
    all_applied(&[&one, &two], applied, Duration::from_secs(5)).await;
    // Give the refused member's links every chance to carry something.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let m = stranger.raft_metrics();
    assert!(
        m.last_applied.is_none_or(|l| l.index == 0) && m.current_leader != Some(leader),
        "a member with another token got entries or follows the leader: {m:?}"
    );
    // Its own elections never win: the two keep their leader.
    assert_eq!(one.raft_metrics().current_leader, Some(leader));
    for n in [one, two, stranger] {
        n.shutdown().await.unwrap();
    }
}

/// Sends one frame (4-byte length, then the bytes) and reads one back (`None`: closed).
async fn exchange(addr: SocketAddr, frame: &[u8]) -> Option<Vec<u8>> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(frame).await.unwrap();
    let len = tokio::time::timeout(Duration::from_secs(10), s.read_u32())
        .await
        .expect("the member neither answers nor closes")
        .ok()? as usize;
    let mut buf = vec![0; len];
    s.read_exact(&mut buf).await.ok()?;
    Some(buf)
}

fn framed(json: &[u8]) -> Vec<u8> {
    [&(json.len() as u32).to_be_bytes()[..], json].concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g1_a_dialer_for_another_cluster_or_member_or_with_garbage_is_refused_and_nothing_changes()
{
    let server = NatsServer::start().unwrap();
    let (dirs, addrs) = (tempdirs(1), free_addrs(1));
    let one = member(&server, 1, &dirs[0], &addrs, TOKEN).await;
    assert!(one.initialize(members(&[1])).await.unwrap());
    agreed_leader(&[&one], Duration::from_secs(5)).await;
    let before = one.raft_metrics().last_applied;

    let hello = |cluster: &str, to: u64| Hello {
        version: VERSION,
        cluster: cluster.into(),
        from: 2,
        to,
        nonce: [3; 32],
    };
    for (h, says) in [
        (hello("elsewhere", 1), "check registry.direct.peers"),
        (hello(CLUSTER, 4), "meant member 4"),
    ] {
        let answer = exchange(addrs[0], &framed(&serde_json::to_vec(&h).unwrap()))
            .await
            .expect("a refusal");
        match serde_json::from_slice::<Reply>(&answer).unwrap() {
            Reply::Refused { why } => assert!(why.contains(says) && !why.contains('\n'), "{why}"),
            other => panic!("not refused: {other:?}"),
        }
    }
    // A length far over the handshake's limit, and a frame that is not JSON: refused in one
    // line, without reading (or allocating) what the length claims.
    for (garbage, says) in [
        (u32::MAX.to_be_bytes().to_vec(), "over 4096"),
        (framed(b"GET / HTTP/1.1"), "no handshake"),
    ] {
        let answer = exchange(addrs[0], &garbage).await.expect("a refusal");
        match serde_json::from_slice::<Reply>(&answer).unwrap() {
            Reply::Refused { why } => assert!(why.contains(says) && !why.contains('\n'), "{why}"),
            other => panic!("not refused: {other:?}"),
        }
    }
    // The member is untouched and still writes.
    assert_eq!(one.raft_metrics().last_applied, before);
    register(&one.client(), 1).await;
    one.shutdown().await.unwrap();
}

/// Mutual TLS from the test PKI `name` in `dir` (its peer certificate: 127.0.0.1, server and
/// client).
fn link_tls(dir: &std::path::Path, name: &str) -> LinkTls {
    LinkTls::from_pem(
        &dir.join(format!("{name}.pem")),
        &dir.join(format!("{name}-peer.pem")),
        &dir.join(format!("{name}-peer-key.pem")),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g1_z1_links_in_mutual_tls_commit_and_refuse_another_ca_and_plain_tcp() {
    let pki = tempfile::tempdir().unwrap();
    lineage_testkit::tls::make_ca(pki.path(), "raft");
    lineage_testkit::tls::make_ca(pki.path(), "other");
    let server = NatsServer::start().unwrap();
    let on_nats = count_raft_on_nats(&server).await;
    let (dirs, addrs) = (tempdirs(3), free_addrs(3));
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let mut cfg = config(id, &path(&dirs[id as usize - 1]));
        let mut links = direct_links(id, &addrs, TOKEN);
        // Member 3's certificate is another CA's: the others refuse it, and it them.
        links.tls = Some(link_tls(pki.path(), if id == 3 { "other" } else { "raft" }));
        cfg.direct = Some(links);
        nodes.push(start(&server, cfg).await);
    }
    assert!(nodes[0].initialize(members(&[1, 2, 3])).await.unwrap());
    let leader = agreed_leader(&[&nodes[0], &nodes[1]], Duration::from_secs(5)).await;
    let client = RegistryClient::new(connect(&server).await, CLUSTER);
    for n in 1..=5 {
        register(&client, n).await;
    }
    let applied = nodes[0].raft_metrics().last_applied.unwrap().index;
    all_applied(&[&nodes[0], &nodes[1]], applied, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let m = nodes[2].raft_metrics();
    assert!(
        m.last_applied.is_none_or(|l| l.index == 0) && m.current_leader != Some(leader),
        "a member of another CA got entries: {m:?}"
    );
    assert_eq!(on_nats.load(Ordering::SeqCst), 0, "Raft RPCs crossed NATS");
    // A dialer that does not speak TLS: its hello is not read as one; it gets no refusal line
    // in clear (the listener's TLS alert, or a close), and nothing changes.
    let hello = Hello {
        version: VERSION,
        cluster: CLUSTER.into(),
        from: 2,
        to: 1,
        nonce: [3; 32],
    };
    let answer = exchange(addrs[0], &framed(&serde_json::to_vec(&hello).unwrap())).await;
    assert!(
        answer
            .as_ref()
            .is_none_or(|a| serde_json::from_slice::<Reply>(a).is_err()),
        "a plain dialer was answered in clear: {answer:?}"
    );
    register(&client, 6).await;
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}
