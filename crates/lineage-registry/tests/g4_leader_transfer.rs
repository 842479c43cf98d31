//! G4: a leader asked to stop hands leadership over first, so a rolling restart of all three
//! voters costs no election. Four clients write (each a new root, with its request id) while the
//! voters restart one after the other (stop, start on the same directory, caught up, next).
//! Checked: each voter that led when it was stopped handed leadership over (openraft's leader
//! transfer, not an election after a timeout); no acknowledged write is lost, and a write a
//! client saw fail is sent again under its request id and applied once. Printed: the longest gap
//! between acknowledged writes, and the same rolling restart with the hand-over off (the
//! baseline: a stopped leader costs an election timeout or more). The gaps are reported, not
//! asserted (figures belong in benchmarks). The second test does the rolling restart with the
//! voters' Raft on their direct links (issue 35).

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use lineage_registry::client::NewSession;
use lineage_registry::leader_transfer::HandOver;
use lineage_registry::{Consistency, RegistryClient, RegistryNode};
use lineage_testkit::NatsServer;

const CLIENTS: u32 = 4;

/// How long a voter is down between its stop and its start (a process restart).
const DOWN: Duration = Duration::from_millis(500);

/// What one rolling restart saw.
struct Rolled {
    /// The acknowledged roots.
    acknowledged: BTreeSet<u32>,
    /// The hand-over outcome of each voter stopped while it led.
    hand_overs: Vec<HandOver>,
    /// The longest time between two acknowledged writes while the voters restarted.
    longest_gap: Duration,
}

/// Over the voters' direct Raft links (issue 35) instead of NATS, with `direct`.
async fn rolling_restart(hand_over: bool, direct: bool) -> Rolled {
    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(3);
    let addrs = free_addrs(3);
    let cfg = |i: usize| {
        let mut c = config(i as u64 + 1, &path(&dirs[i]));
        c.hand_over_on_shutdown = hand_over;
        if direct {
            c.direct = Some(direct_links(
                i as u64 + 1,
                &addrs,
                "a token for the g4 tests, long enough",
            ));
        }
        c
    };
    let mut nodes: Vec<Option<RegistryNode>> = Vec::new();
    for i in 0..3 {
        nodes.push(Some(start(&server, cfg(i)).await));
    }
    assert!(nodes[0]
        .as_ref()
        .unwrap()
        .initialize(members(&[1, 2, 3]))
        .await
        .unwrap());
    {
        let refs: Vec<&RegistryNode> = nodes.iter().flatten().collect();
        agreed_leader(&refs, Duration::from_secs(10)).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let acks: Arc<Mutex<Vec<(Instant, u32)>>> = Arc::default();
    let mut writers = Vec::new();
    for c in 0..CLIENTS {
        let client = RegistryClient::new(connect(&server).await, CLUSTER);
        let (stop, acks) = (stop.clone(), acks.clone());
        writers.push(tokio::spawn(async move {
            // Bounded: at most 100,000 writes per client.
            for k in 0..100_000u32 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let n = 1 + c * 100_000 + k;
                // A write the client gave up on is sent again under the same request id.
                for attempt in 0..50 {
                    match client
                        .register_session(
                            rid(format!("root-{n}")),
                            1,
                            root_header(n),
                            NewSession {
                                node: Some(node_id(9)),
                                ..Default::default()
                            },
                        )
                        .await
                    {
                        Ok(_) => {
                            acks.lock().unwrap().push((Instant::now(), n));
                            break;
                        }
                        Err(e) if attempt == 49 => panic!("root-{n} never acknowledged: {e}"),
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = Instant::now();
    let mut hand_overs = Vec::new();
    for i in 0..3 {
        let node = nodes[i].take().unwrap();
        if hand_over && node.raft_metrics().current_leader == Some(node.raft_id()) {
            hand_overs.push(node.hand_over_leadership().await.unwrap());
        }
        node.shutdown().await.unwrap();
        // A process restart: exit, start, open the store.
        tokio::time::sleep(DOWN).await;
        nodes[i] = Some(start(&server, cfg(i)).await);
        let refs: Vec<&RegistryNode> = nodes.iter().flatten().collect();
        agreed_leader(&refs, Duration::from_secs(10)).await;
        let applied = refs
            .iter()
            .filter_map(|n| n.raft_metrics().last_applied.map(|l| l.index))
            .max()
            .unwrap_or(0);
        all_applied(&refs, applied, Duration::from_secs(10)).await;
    }
    let ended = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }

    let mut times: Vec<Instant> = acks.lock().unwrap().iter().map(|(t, _)| *t).collect();
    times.sort();
    let longest_gap = times
        .windows(2)
        .filter(|w| w[1] >= began && w[0] <= ended)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    let acknowledged: BTreeSet<u32> = acks.lock().unwrap().iter().map(|(_, n)| *n).collect();

    // Nothing acknowledged is lost: every root is in the registry, read linearizably.
    let client = RegistryClient::new(connect(&server).await, CLUSTER);
    for n in &acknowledged {
        let record = client
            .session(sid(*n), Consistency::Linearizable)
            .await
            .unwrap();
        assert!(record.is_some(), "acknowledged root-{n} is missing");
    }
    for node in nodes.into_iter().flatten() {
        node.shutdown().await.unwrap();
    }
    Rolled {
        acknowledged,
        hand_overs,
        longest_gap,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g4_a_rolling_restart_of_the_voters_hands_leadership_over_and_loses_no_write() {
    let with = rolling_restart(true, false).await;
    let without = rolling_restart(false, false).await;
    println!(
        "rolling restart of 3 voters, {CLIENTS} clients writing: longest gap between acknowledged writes {:?} with the hand-over ({} writes), {:?} without it ({} writes); election timeout 150-300 ms",
        with.longest_gap,
        with.acknowledged.len(),
        without.longest_gap,
        without.acknowledged.len()
    );
    // The first leader is stopped in the first pass at the latest: at least one hand-over, and
    // every one of them was taken.
    assert!(!with.hand_overs.is_empty(), "no voter led when stopped?");
    for h in &with.hand_overs {
        assert!(matches!(h, HandOver::HandedTo(_)), "{h:?}");
    }
    assert!(!with.acknowledged.is_empty() && !without.acknowledged.is_empty());
}

/// The same on the voters' direct Raft links: the leader transfer and the catch-up of each
/// restarted voter go over them (a restarted voter listens on its port again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g4_on_direct_raft_links_a_rolling_restart_hands_leadership_over_and_loses_no_write() {
    let rolled = rolling_restart(true, true).await;
    println!(
        "rolling restart of 3 voters on direct Raft links, {CLIENTS} clients writing: longest gap between acknowledged writes {:?} ({} writes)",
        rolled.longest_gap,
        rolled.acknowledged.len()
    );
    assert!(!rolled.hand_overs.is_empty(), "no voter led when stopped?");
    for h in &rolled.hand_overs {
        assert!(matches!(h, HandOver::HandedTo(_)), "{h:?}");
    }
    assert!(!rolled.acknowledged.is_empty());
}
