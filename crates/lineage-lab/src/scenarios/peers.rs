//! `lineage bench peers` (issue 14): lineage side by side with what a user would pick instead,
//! in one run on one machine, one system at a time.
//!
//! | work | lineage | peers |
//! |---|---|---|
//! | parent awaits a one-shot child | the `spawn` workload (one-shot scripted child on node 2 of a parent on node 1), JetStream `sync_interval: always` | Restate (a parent handler calls a child handler and awaits it; Python SDK on hypercorn), Temporal dev server (a parent workflow runs a child workflow; Python SDK worker) |
//! | durable replicated write | the registry's `RegisterSession` (3 voters, fsync), the `registry` workload | etcd (3 members, a 400 B put), NATS KV R1 (one server) and R3 (three), `sync_interval: always` |
//!
//! Each at 1 and 64 concurrent callers. The peers are installed by `scripts/bench-peers.sh`
//! (`LINEAGE_PEERS_DIR`, default the repository's `target/peers`) and started here on
//! loopback, on free ports, in temp dirs, and stopped (by their pid's process group) before the
//! next one; the Go and Python drivers (`benches/peers`, `LINEAGE_PEERS_SRC`) print one JSON
//! line of samples. A peer that is not installed or does not start is a row saying
//! `skipped: why`. The table ends with lineage's figure over each peer's.

mod anatomy;
mod procs;
mod systems;

use std::time::Duration;

use lineage_bus::control::ControlError;
use lineage_registry::bench::RegisterBench;

use super::{scaled, spawn_phase, Bench};
use crate::bench::Samples;
use lineage::global::Global;
use procs::Install;

/// What a row measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Work {
    /// A parent awaits a one-shot child.
    Spawn,
    /// A durable replicated write.
    Write,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Spawn => "parent awaits a one-shot child",
            Work::Write => "durable replicated write",
        }
    }
}

/// One line of the table: a system at a concurrency, its samples or why it has none.
struct Row {
    work: Work,
    clients: usize,
    system: String,
    outcome: Result<Samples, String>,
}

impl Row {
    fn new(work: Work, clients: usize, system: &str, outcome: Result<Samples, String>) -> Row {
        let row = Row {
            work,
            clients,
            system: system.to_owned(),
            outcome,
        };
        match &row.outcome {
            Ok(s) => println!(
                "{} ({} clients): {}: n={} p50={:.3}ms p99={:.3}ms {:.1}/s",
                work.name(),
                clients,
                row.system,
                s.latencies.len(),
                ms(s.p50()),
                ms(s.p99()),
                s.throughput()
            ),
            Err(why) => println!(
                "{} ({} clients): {}: skipped: {why}",
                work.name(),
                clients,
                row.system
            ),
        }
        row
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The concurrency levels: callers, and operations for each workload (scaled).
pub(super) const SPAWNS: [(usize, usize); 2] = [(1, 200), (64, 640)];
const WRITES: [(usize, usize); 2] = [(1, 800), (64, 6400)];

/// `lineage bench peers`.
pub(super) async fn peers(g: &Global) -> Result<(), ControlError> {
    if g.nats.is_some() {
        return Err(lineage::output::usage(
            "`lineage bench peers` compares systems on one machine, each alone: it runs only on a cluster of its own; drop --nats (and NATS_URL)",
        ));
    }
    let install = Install::locate();
    println!(
        "peers installed in {} (scripts/bench-peers.sh), drivers from {}; one system at a time",
        install.dir.display(),
        install.src.display()
    );
    let mut rows = Vec::new();
    {
        let b = Bench::setup(g, true).await?;
        lineage(g, &b, &mut rows).await;
        b.cleanup().await;
    } // the cluster stops here, before any peer starts
    for replicas in [1, 3] {
        systems::nats_kv(replicas, &mut rows).await;
    }
    systems::etcd(&install, &mut rows).await;
    systems::restate(&install, &mut rows).await;
    systems::temporal(&install, &mut rows).await;
    println!();
    print_table(&rows);
    Ok(())
}

/// lineage's rows: the spawn workload and the registry's, on the bench's own cluster.
async fn lineage(g: &Global, b: &Bench, rows: &mut Vec<Row>) {
    for (clients, ops) in SPAWNS {
        let outcome = spawn_phase(b, clients, ops)
            .await
            .map_err(|e| e.to_string());
        rows.push(Row::new(Work::Spawn, clients, "lineage", outcome));
    }
    // What a replicated write is made of, on this machine: the NATS round trip (the baseline
    // above) and a raw fsync on the registry's disk.
    match lineage_registry::bench::fsync_probe(&b.scratch, scaled(200)) {
        Ok(f) => b.report(
            "raw fsync (512 B append), same disk",
            &Samples {
                latencies: f.latencies,
                wall: f.wall,
            },
        ),
        Err(e) => println!("raw fsync probe failed: {e}"),
    }
    let work = RegisterBench::new(
        b.registry.clone(),
        lineage_registry::bench::run_prefix(),
        scaled(50) as u64,
    )
    .await
    .map_err(|e| format!("registry warm-up: {e}"));
    for (clients, ops) in WRITES {
        let outcome = match &work {
            Ok(work) => work
                .run_batch(scaled(ops).max(clients) as u64, clients)
                .await
                .map(|batch| Samples {
                    latencies: batch.latencies,
                    wall: batch.wall,
                })
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.clone()),
        };
        rows.push(Row::new(
            Work::Write,
            clients,
            "lineage registry (3 voters)",
            outcome,
        ));
    }
    if let Ok(work) = &work {
        let cluster = lineage::global::cluster(g);
        if let Err(e) = anatomy::registry_write(b, work, &cluster, scaled(200)).await {
            println!("registry write, where the time goes: not measured: {e}");
        }
    }
}

/// The table (markdown), lineage first in each group, then its figures over each peer's:
/// p50 (below 1: lineage is faster) and throughput (above 1: lineage does more per second).
fn print_table(rows: &[Row]) {
    println!("| work | callers | system | n | p50 | p99 | throughput | lineage p50 / peer p50 | lineage throughput / peer |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for work in [Work::Spawn, Work::Write] {
        for clients in [1, 64] {
            let group: Vec<&Row> = rows
                .iter()
                .filter(|r| r.work == work && r.clients == clients)
                .collect();
            let ours = group
                .iter()
                .find(|r| r.system.starts_with("lineage"))
                .and_then(|r| r.outcome.as_ref().ok());
            for r in group {
                match &r.outcome {
                    Ok(s) => {
                        let (p50, tput) = match ours {
                            Some(l) if !r.system.starts_with("lineage") => (
                                format!("{:.2}x", ms(l.p50()) / ms(s.p50()).max(1e-9)),
                                format!("{:.2}x", l.throughput() / s.throughput().max(1e-9)),
                            ),
                            _ => (String::new(), String::new()),
                        };
                        println!(
                            "| {} | {} | {} | {} | {:.2} ms | {:.2} ms | {:.0} /s | {p50} | {tput} |",
                            work.name(),
                            clients,
                            r.system,
                            s.latencies.len(),
                            ms(s.p50()),
                            ms(s.p99()),
                            s.throughput()
                        );
                    }
                    Err(why) => println!(
                        "| {} | {} | {} | skipped: {} | | | | | |",
                        work.name(),
                        clients,
                        r.system,
                        why.replace('|', "/").replace('\n', " ")
                    ),
                }
            }
        }
    }
}
