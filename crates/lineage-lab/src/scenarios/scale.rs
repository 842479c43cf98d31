//! `lineage bench scale`: the registry at a million sessions (issue 13).
//!
//! On the bench's own cluster only (3 `lineage node` processes, all voters, redb with fsync):
//!
//! 1. registers `LINEAGE_BENCH_SCALE` x 1,000,000 sessions in trees of 1,000 (depth 4, fan-out
//!    6), 256 writers, each session `running` and placed on one of three node ids that no
//!    process owns (`scale-a`, `-b`, `-c`): no node re-adopts, sweeps or hosts them, so the run
//!    measures the registry alone; a child carries the descriptor a spawn records;
//! 2. at 10% and at 100%: register latency (1 and 64 clients, children of a fresh root), each
//!    node's RSS growth per session, and the last snapshot each member built (size, time);
//!    then, when the nodes' results window is short, RSS per session again once the load's
//!    request results are forgotten ([`settled`]);
//! 3. restart: a follower is SIGKILLed and started again on the same disk; time to its first
//!    answer and until it applied what the leader had applied, and its load time at open;
//! 4. catch-up from a snapshot: a follower is SIGKILLed, the others register until the leader
//!    built a snapshot past it (and purged the log behind), the follower starts again; time
//!    until it applied what the leader had, and its install time.
//!
//! Steps 1 and 2 are this file; steps 3 and 4 are `scale/restart.rs`.

mod restart;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lineage_bus::control::ControlError;
use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_registry::client::NewSession;

use super::{internal, scaled, unavailable, Bench};
use crate::bench::{concurrent, Samples};
use restart::restart;

/// Sessions per tree.
const TREE: usize = 1000;
/// Children per parent above the last level.
const FANOUT: usize = 6;
/// Trees registered per chunk (the bulk load registers a chunk level by level).
const CHUNK_TREES: usize = 100;
/// Concurrent writers of the bulk load.
const WRITERS: usize = 256;
/// Node ids the sessions are placed on: no process owns them.
const PLACES: [&str; 3] = ["scale-a", "scale-b", "scale-c"];

/// `scale`. On a failure, the last lines of each node's log are printed (the cluster's
/// directory is removed afterwards).
pub(super) async fn scale(b: &Bench) -> Result<(), ControlError> {
    let outcome = run(b).await;
    if outcome.is_err() {
        let cluster = b.cluster.lock().await;
        for node in cluster.iter().flat_map(|c| c.nodes.iter()) {
            let text = std::fs::read_to_string(&node.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            println!("-- last lines of {}'s log --", node.id);
            for line in &lines[lines.len().saturating_sub(15)..] {
                println!("  {line}");
            }
        }
    }
    outcome
}

async fn run(b: &Bench) -> Result<(), ControlError> {
    if b.external {
        return Err(internal(
            "`lineage bench scale` was given a cluster (bench() refuses --nats for it)",
        ));
    }
    let total = scaled(1_000_000).max(TREE);
    let checkpoints = [(total / 10).max(TREE), total];
    let places: Vec<NodeId> = PLACES
        .iter()
        .map(|p| NodeId::parse(p).map_err(|e| internal(e.to_string())))
        .collect::<Result<_, _>>()?;
    println!(
        "{total} sessions in trees of {TREE} (depth 4, fan-out {FANOUT}), {WRITERS} writers, each `running`, placed on {} (no process owns them); checkpoints at {} and {}",
        PLACES.join("/"),
        checkpoints[0],
        checkpoints[1]
    );
    let rss0 = node_rss(b).await;
    let mut made = 0usize;
    let load_started = Instant::now();
    for &checkpoint in &checkpoints {
        while made < checkpoint {
            let trees = (checkpoint - made).div_ceil(TREE).clamp(1, CHUNK_TREES);
            let t = Instant::now();
            let samples = register_forest(b, trees, &places, WRITERS).await?;
            made += trees * TREE;
            println!(
                "  {made} registered: this chunk {:.0} writes/s, p50 {:.2} ms, p99 {:.2} ms ({:.0?} since start)",
                (trees * TREE) as f64 / t.elapsed().as_secs_f64().max(1e-9),
                samples.p50().as_secs_f64() * 1e3,
                samples.p99().as_secs_f64() * 1e3,
                load_started.elapsed()
            );
        }
        measure_at(b, made, &rss0, &places).await?;
        // The samples of `measure_at` are sessions too.
        made += 1 + sample_sizes().iter().map(|(_, n, _)| n).sum::<usize>();
    }
    settled(b, made, &rss0).await;
    restart(b, made, None).await?;
    restart(b, made, Some((made, places.as_slice()))).await?;
    println!(
        "writes retried with their request id after the client's 10 s deadline: {}",
        RETRIED.load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}

/// The latency samples taken at each checkpoint: (name, writes, clients).
fn sample_sizes() -> [(&'static str, usize, usize); 2] {
    [
        ("register child, 1 client", scaled(500).max(50), 1),
        ("register child, 64 clients", scaled(6400).max(640), 64),
    ]
}

fn new_id() -> Result<SessionId, ControlError> {
    SessionId::parse(&uuid::Uuid::now_v7().to_string()).map_err(|e| internal(e.to_string()))
}

/// Registers `trees` trees of [`TREE`] sessions, level by level across them.
async fn register_forest(
    b: &Bench,
    trees: usize,
    places: &[NodeId],
    writers: usize,
) -> Result<Samples, ControlError> {
    let mut level: Vec<SessionHeader> = (0..trees)
        .map(|_| new_id().map(|id| SessionHeader::top_level(id, None, None)))
        .collect::<Result<_, _>>()?;
    let mut all = Samples::default();
    let mut per_tree = 1usize;
    let mut depth = 0u64;
    loop {
        let s = register_level(b, level.clone(), places, writers).await?;
        all.latencies.extend(s.latencies);
        all.wall += s.wall;
        if per_tree >= TREE {
            return Ok(all);
        }
        depth += 1;
        // Per tree: FANOUT children per parent, the last level (depth 4) takes what is left.
        let parents_per_tree = level.len() / trees;
        let want = if depth < 4 {
            (parents_per_tree * FANOUT).min(TREE - per_tree)
        } else {
            TREE - per_tree
        };
        let mut next = Vec::with_capacity(want * trees);
        for tree in 0..trees {
            let parents = &level[tree * parents_per_tree..(tree + 1) * parents_per_tree];
            for i in 0..want {
                let parent = &parents[i % parents.len()];
                next.push(
                    child_session_meta(parent, new_id()?, depth, 0, None)
                        .map_err(|e| internal(e.to_string()))?,
                );
            }
        }
        per_tree += want;
        level = next;
    }
}

/// Registers `level` with `writers` writers, hosted (running) on `places` round-robin.
async fn register_level(
    b: &Bench,
    level: Vec<SessionHeader>,
    places: &[NodeId],
    writers: usize,
) -> Result<Samples, ControlError> {
    let level = Arc::new(level);
    let places = Arc::new(places.to_vec());
    let registry = b.registry.clone();
    concurrent(level.len(), writers, move |i| {
        let header = level[i].clone();
        let node = places[i % places.len()].clone();
        let registry = registry.clone();
        async move { register(&registry, header, node).await }
    })
    .await
}

/// The descriptor a continuable scripted child is registered with (what `spawn` records).
fn descriptor() -> Option<lineage_core::descriptor::SubagentDescriptor> {
    Some(lineage_core::descriptor::SubagentDescriptor {
        provider: "script".to_owned(),
        label: None,
        mode: lineage_core::descriptor::SubagentShape::Continuable,
        tool_filter: None,
        persona: None,
    })
}

/// Registers one session, `running` on `node`; a child gets the descriptor a spawn records.
async fn register(
    registry: &lineage_registry::RegistryClient,
    header: SessionHeader,
    node: NodeId,
) -> Result<(), ControlError> {
    let descriptor = if header.parent_session().is_some() {
        descriptor()
    } else {
        None
    };
    let request =
        RequestId::parse(&uuid::Uuid::now_v7().to_string()).map_err(|e| internal(e.to_string()))?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let outcome = registry
            .register_session(
                request.clone(),
                lineage::client::now_ms(),
                header.clone(),
                NewSession {
                    descriptor: descriptor.clone(),
                    node: Some(node.clone()),
                    hosted: true,
                    ..NewSession::default()
                },
            )
            .await;
        match outcome {
            Ok(_) => return Ok(()),
            // What a client is told to do: retry with the same request id (applied once).
            Err(lineage_registry::RegistryError::Timeout { .. }) if attempt < 3 => {
                RETRIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => return Err(unavailable("register a scale session", e)),
        }
    }
}

/// Writes retried (same request id) after the client's 10 s deadline, in the whole run.
static RETRIED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Latency samples, RSS per session and the last snapshots, with `made` sessions registered.
async fn measure_at(
    b: &Bench,
    made: usize,
    rss0: &[(String, u64)],
    places: &[NodeId],
) -> Result<(), ControlError> {
    println!("-- at {made} sessions --");
    let root = SessionHeader::top_level(new_id()?, None, None);
    register(&b.registry, root.clone(), places[0].clone()).await?;
    for (name, writes, clients) in sample_sizes() {
        let root = Arc::new(root.clone());
        let registry = b.registry.clone();
        let node = places[1].clone();
        let samples = concurrent(writes, clients, move |_| {
            let registry = registry.clone();
            let root = root.clone();
            let node = node.clone();
            async move {
                let header = child_session_meta(&root, new_id()?, 1, 0, None)
                    .map_err(|e| internal(e.to_string()))?;
                register(&registry, header, node).await
            }
        })
        .await?;
        b.report(&format!("{name} at {made}"), &samples);
    }
    let rss = node_rss(b).await;
    for ((node, now), (_, before)) in rss.iter().zip(rss0) {
        let grown = now.saturating_sub(*before);
        println!(
            "  {node}: RSS {:.0} MiB (+{:.0} MiB since the start: {:.0} B per session)",
            *now as f64 / 1048576.0,
            grown as f64 / 1048576.0,
            grown as f64 / made as f64
        );
    }
    for (node, port) in http_ports(b).await {
        let m = scrape(port).await;
        let get = |k: &str| m.get(k).copied().unwrap_or(f64::NAN);
        println!(
            "  {node}: last snapshot built {:.1} MB in {:.2} s ({} built so far); applied index {}; request results kept {} (retention.request_results_ms)",
            get("lineage_registry_snapshot_bytes") / 1e6,
            get("lineage_registry_snapshot_build_seconds"),
            get("lineage_registry_snapshots_built_total"),
            get("lineage_raft_applied_index"),
            get("lineage_registry_request_results"),
        );
    }
    Ok(())
}

/// The longest results window the bench waits out ([`settled`]): a configured window longer
/// than this (the default is a day) is not waited for.
const SETTLE_WINDOW_LIMIT: Duration = Duration::from_secs(120);

/// Memory per session once the last writes' request results are forgotten: the results are
/// bounded by time (writes per `retention.request_results_ms`), not by sessions, so at the
/// last checkpoint each member still holds the last window's. When the nodes' window (the
/// `LINEAGE_RETENTION__REQUEST_RESULTS_MS` they inherit) is at most [`SETTLE_WINDOW_LIMIT`],
/// waits (bounded: the window plus a minute) until every member keeps at most one result per
/// thousand sessions, then prints each member's RSS per session again.
async fn settled(b: &Bench, made: usize, rss0: &[(String, u64)]) {
    let window = std::env::var("LINEAGE_RETENTION__REQUEST_RESULTS_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis);
    let Some(window) = window.filter(|w| *w <= SETTLE_WINDOW_LIMIT) else {
        println!(
            "-- settled: not measured (LINEAGE_RETENTION__REQUEST_RESULTS_MS unset or over {} s: the results of the load are kept for the whole window) --",
            SETTLE_WINDOW_LIMIT.as_secs()
        );
        return;
    };
    let started = Instant::now();
    let limit = window + Duration::from_secs(60);
    let few = (made / 1000) as f64;
    let (kept, done) = loop {
        let mut kept = Vec::new();
        for (node, port) in http_ports(b).await {
            let m = scrape(port).await;
            kept.push((node, m.get("lineage_registry_request_results").copied()));
        }
        let done = kept.iter().all(|(_, k)| k.is_some_and(|k| k <= few));
        if done || started.elapsed() >= limit {
            break (kept, done);
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    if done {
        println!(
            "-- settled: {:.0?} after the last checkpoint (results window {} s), no writes --",
            started.elapsed(),
            window.as_secs()
        );
    } else {
        println!(
            "-- settled: NOT reached: results still kept {:.0?} after the last checkpoint (results window {} s; the retention sweep is behind), figures below include them --",
            started.elapsed(),
            window.as_secs()
        );
    }
    let rss = node_rss(b).await;
    for (((node, now), (_, before)), (_, results)) in rss.iter().zip(rss0).zip(&kept) {
        let grown = now.saturating_sub(*before);
        println!(
            "  {node}: RSS {:.0} MiB (+{:.0} MiB since the start: {:.0} B per session); request results kept {}",
            *now as f64 / 1048576.0,
            grown as f64 / 1048576.0,
            grown as f64 / made as f64,
            results.map_or("unknown".to_owned(), |r| format!("{r:.0}"))
        );
    }
}

/// RSS of each node process, bytes.
async fn node_rss(b: &Bench) -> Vec<(String, u64)> {
    let cluster = b.cluster.lock().await;
    let Some(c) = cluster.as_ref() else {
        return Vec::new();
    };
    c.nodes
        .iter()
        .map(|n| {
            let kb = n
                .child
                .as_ref()
                .and_then(|child| {
                    std::fs::read_to_string(format!("/proc/{}/status", child.id())).ok()
                })
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|v| v.parse::<u64>().ok())
                })
                .unwrap_or(0);
            (n.id.clone(), kb * 1024)
        })
        .collect()
}

async fn http_ports(b: &Bench) -> Vec<(String, u16)> {
    let cluster = b.cluster.lock().await;
    cluster
        .as_ref()
        .map(|c| {
            c.nodes
                .iter()
                .map(|n| (n.id.clone(), n.http_port))
                .collect()
        })
        .unwrap_or_default()
}

/// A node's `/metrics`, as `name -> value` (series without labels other than `node`); empty
/// when it does not answer.
async fn scrape(port: u16) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Some((200, text)) = lineage::dev::http_get(port, "/metrics").await else {
        return out;
    };
    for line in text.lines().filter(|l| l.starts_with("lineage_")) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = match series.split_once('{') {
            Some((name, labels)) if !labels.contains(',') => name,
            Some(_) => continue,
            None => series,
        };
        if let Ok(v) = value.parse::<f64>() {
            out.insert(name.to_owned(), v);
        }
    }
    out
}
