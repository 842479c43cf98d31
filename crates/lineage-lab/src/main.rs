//! `lineage-lab`: the lab. Benchmarks (`bench`: every scenario against a local cluster of real
//! `lineage` processes, with a baseline measured in the same run) and the fault harness
//! (`chaos`). A program of its own so that the shipped `lineage` does not carry it; `lineage
//! bench ARGS` and `lineage chaos ARGS` run it with the same command line (`lineage::lab`). It
//! takes `lineage`'s global flags and starts clusters of the `lineage` beside it.
//!
//! | module | what |
//! |---|---|
//! | [`bench`](mod@bench) | what every benchmark measures with: samples, percentiles, the NATS baseline, workers |
//! | [`scenarios`] | `bench`: the scenario names and the scenarios, one file each, and the peers (Restate, Temporal, etcd, NATS KV) |
//! | [`chaos`] | `chaos`: the fault harness (issue 12) |

mod bench;
mod chaos;
mod scenarios;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use lineage::global::Global;

/// The global allocator of the shipped `lineage` (mimalloc), so that what runs in this process
/// (the registry benchmarks' members) allocates as a node does.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// lineage's lab: benchmarks and the fault harness (`lineage bench`, `lineage chaos`).
#[derive(Debug, Parser)]
#[command(name = "lineage-lab", version, about)]
struct Lab {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    verb: LabVerb,
}

/// The lab's verbs.
#[derive(Debug, Subcommand)]
enum LabVerb {
    /// Benchmarks (percentiles, throughput, and a raw NATS round-trip baseline).
    #[command(after_help = "Example:\n  lineage bench registry")]
    Bench {
        /// Scenario: baseline, registry, spawn, settle, resume, drain, tools, all; scale, peers, workspace.
        scenario: String,
    },
    /// Fault harness: a cluster of its own under a seeded workload and fault schedule,
    /// checked (Porcupine and invariants); exits non-zero on a violation.
    #[command(after_help = "Example:\n  lineage chaos --seed 12 --duration 30m")]
    Chaos(chaos::ChaosArgs),
}

fn main() {
    let matches = Lab::command().get_matches();
    let mut lab = Lab::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    lab.global.from_env = lineage::cli::flags_from_env(&matches);
    let g = lab.global;
    lineage::run::exit_with(async move {
        let outcome = match lab.verb {
            LabVerb::Bench { scenario } => scenarios::bench(&g, &scenario).await,
            LabVerb::Chaos(args) => chaos::chaos(&g, args).await,
        };
        match outcome {
            Ok(()) => 0,
            Err(e) => lineage::output::fail(g.json, &e),
        }
    })
}
