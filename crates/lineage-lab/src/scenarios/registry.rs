//! `lineage bench registry`: register-child writes straight to the registry, 1 and 64 clients,
//! against the cluster's 3 voters. On its own cluster the voters' Raft RPCs go over their
//! direct links (`lineage dev`'s default); the same writes then run on a second local cluster
//! whose voters send them through nats-server (`lineage dev --raft-over-nats`), started before
//! either is measured (so each measurement has the other cluster idle beside it), as the peer
//! measured in the same run; the bench prints what the direct links change.

use lineage::dev::{DevCluster, RaftLinks};
use lineage_bus::control::ControlError;
use lineage_registry::bench::RegisterBench;
use lineage_registry::RegistryClient;

use super::{connect, internal, scaled, unavailable, Bench};
use crate::bench::Samples;

/// The write phases: name, writes, clients.
fn phases() -> [(&'static str, usize, usize); 2] {
    [
        ("register child, 1 client", scaled(800), 1),
        ("register child, 64 clients", scaled(6400).max(64), 64),
    ]
}

/// `registry`: the fsync probe, the write phases, then (own cluster) the same phases with Raft
/// through nats-server.
pub(super) async fn registry(b: &Bench) -> Result<(), ControlError> {
    let fsync = lineage_registry::bench::fsync_probe(&b.scratch, scaled(200))
        .map_err(|e| internal(format!("fsync probe in {}: {e}", b.scratch.display())))?;
    b.report(
        "raw fsync (512 B append), same disk",
        &Samples {
            latencies: fsync.latencies,
            wall: fsync.wall,
        },
    );
    if b.external {
        writes(b, b.registry.clone(), "").await?;
        return Ok(());
    }
    // The peer cluster is up before either is measured, so both measurements run beside one
    // other idle cluster (its heartbeats) and neither has the machine to itself.
    println!("a second local cluster whose voters send their Raft RPCs through nats-server (lineage dev --raft-over-nats), up during both measurements ...");
    let cluster = b.cluster_name.clone();
    let peer = DevCluster::start(3, None, None, &cluster, RaftLinks::Nats).await?;
    let client = connect(&peer.nats.url()).await?;
    println!("the voters' Raft RPCs over their direct links ([registry.direct]):");
    let direct = writes(b, b.registry.clone(), "").await?;
    println!("the same writes, Raft through NATS:");
    let over_nats = writes(
        b,
        RegistryClient::new(client, cluster.clone()),
        ", Raft through NATS",
    )
    .await?;
    drop(peer);
    let ms = |s: &Samples| s.p50().as_secs_f64() * 1000.0;
    println!(
        "direct Raft links vs Raft through NATS: 1 client p50 {:.3} vs {:.3} ms ({:+.3} ms); 64 clients {:.0} vs {:.0} writes/s ({:+.0}%)",
        ms(&direct[0]),
        ms(&over_nats[0]),
        ms(&direct[0]) - ms(&over_nats[0]),
        direct[1].throughput(),
        over_nats[1].throughput(),
        (direct[1].throughput() / over_nats[1].throughput() - 1.0) * 100.0,
    );
    Ok(())
}

/// The write phases through `registry`, each reported under its name and `suffix`.
async fn writes(
    b: &Bench,
    registry: RegistryClient,
    suffix: &str,
) -> Result<Vec<Samples>, ControlError> {
    // The bench client is a "hosting node": its own connection.
    let work = RegisterBench::new(
        registry,
        lineage_registry::bench::run_prefix(),
        scaled(50) as u64,
    )
    .await
    .map_err(|e| unavailable("registry warm-up", e))?;
    if b.external {
        // Too many children for one drain reply; left in place, under their own root.
        println!(
            "the registered children stay in the given cluster under root {}",
            work.root().id()
        );
    }
    let mut all = Vec::new();
    for (name, ops, clients) in phases() {
        let name = format!("{name}{suffix}");
        let batch = work
            .run_batch(ops as u64, clients)
            .await
            .map_err(|e| unavailable(&name, e))?;
        let samples = Samples {
            latencies: batch.latencies,
            wall: batch.wall,
        };
        b.report(&name, &samples);
        all.push(samples);
    }
    Ok(all)
}
