//! `lineage chaos`: the fault harness of issue 12. It starts a real cluster of its own on
//! loopback ([`rig`]: a 3-server NATS cluster with R3 streams, 3 registry voters and 2 workers,
//! every node behind toxiproxy), drives two seeded, bounded workloads at once ([`trees`]: trees
//! of agents through the CLI; [`registry`]: direct registry clients whose history Porcupine
//! checks), injects every kind of fault on a seeded schedule ([`faults`]), then checks the
//! promises from the final state and the streams ([`checks`]) and prints a table per fault
//! kind ([`report`]). A failure prints the seed and the command that repeats the run.
//!
//! | module | what |
//! |---|---|
//! | [`rig`] | the cluster and its proxies |
//! | [`faults`] | the fault kinds, the seeded schedule, injecting and healing one |
//! | [`trees`] | the tree workload (CLI calls, recorded) |
//! | [`registry`] | the registry workload and the Porcupine check |
//! | [`checks`] | the invariants from the final state |
//! | [`report`] | the table per fault kind |

mod checks;
mod faults;
mod registry;
mod report;
mod rig;
mod trees;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use lineage_bus::control::{ControlError, ErrorCode};

use lineage::global::Global;
use lineage::output::usage;

/// `lineage chaos` arguments.
#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// Seed of the workload and the fault schedule (the same seed repeats a run).
    #[arg(long, default_value_t = 12)]
    pub seed: u64,
    /// How long the workloads and faults run: `90s`, `30m`, `2h` (the checks come after).
    #[arg(long, default_value = "2m")]
    pub duration: String,
    /// Concurrent tree clients (CLI processes).
    #[arg(long, default_value_t = 3)]
    pub tree_clients: usize,
    /// Concurrent registry clients (their history goes to Porcupine).
    #[arg(long, default_value_t = 3)]
    pub registry_clients: usize,
    /// Fault kinds to inject, comma-separated (a failure names the ones around each
    /// violation): kill-leader, kill-follower, kill-worker, kill-nats, stop-leader,
    /// stop-follower, stop-worker, stop-nats, latency, slicer, limit-data, blackhole, reset,
    /// cut; or all.
    #[arg(long, default_value = "all")]
    pub faults: String,
}

/// Parses `90s`, `30m`, `2h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().map_err(|_| {
        format!(
            "--duration {text:?} is not a duration; give a number and a unit, e.g. 90s, 30m or 2h"
        )
    })?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => {
            return Err(format!(
                "--duration {text:?} has unit {unit:?}; use s, m or h, e.g. 90s, 30m or 2h"
            ))
        }
    };
    match secs {
        0 => Err(format!("--duration {text:?} is zero; give at least 30s")),
        s if s < 30 => Err(format!(
            "--duration {text:?} is shorter than one round of faults needs; give at least 30s"
        )),
        s if s > 24 * 3600 => Err(format!(
            "--duration {text:?} is over a day; give 24h or less"
        )),
        s => Ok(Duration::from_secs(s)),
    }
}

/// Runs `lineage chaos`.
pub async fn chaos(g: &Global, args: ChaosArgs) -> Result<(), ControlError> {
    let duration = parse_duration(&args.duration).map_err(usage)?;
    let kinds = faults::Fault::parse_list(&args.faults).map_err(usage)?;
    for (flag, n, max) in [
        ("--tree-clients", args.tree_clients, 16),
        ("--registry-clients", args.registry_clients, 16),
    ] {
        if n == 0 || n > max {
            return Err(usage(format!(
                "{flag} {n} is out of range; give 1 to {max}"
            )));
        }
    }
    let exe = lineage::dev::lineage_program()
        .map_err(|e| internal(format!("cannot find the lineage binary: {e}")))?;
    lineage_testkit::binary::set_lineage_bin(exe);
    let json = g.json;
    let run = std::thread::spawn(move || {
        std::panic::catch_unwind(|| run(&args, duration, kinds, json)).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            Err(internal(format!(
                "the harness itself failed (not a finding about lineage): {}",
                what.lines().next().unwrap_or("?")
            )))
        })
    });
    match tokio::task::spawn_blocking(move || run.join()).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_)) => Err(internal("the chaos run stopped")),
        Err(e) => Err(internal(format!("the chaos run stopped: {e}"))),
    }
}

/// Milliseconds since the Unix epoch (the registry's clock for `created_at_ms`).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn internal(message: impl Into<String>) -> ControlError {
    ControlError::new(ErrorCode::Internal, message)
}

/// The whole run, on a thread of its own (the harness blocks).
fn run(
    args: &ChaosArgs,
    duration: Duration,
    kinds: Vec<faults::Fault>,
    json: bool,
) -> Result<(), ControlError> {
    let seed = args.seed;
    let repeat = format!(
        "lineage chaos --seed {seed} --duration {} --tree-clients {} --registry-clients {} --faults {}",
        args.duration, args.tree_clients, args.registry_clients, args.faults
    );
    let toxiproxy = lineage_testkit::toxiproxy::toxiproxy().ok_or_else(|| {
        ControlError::new(
            ErrorCode::Unavailable,
            "toxiproxy-server is not installed and `go install` could not install it; run scripts/install-deps.sh",
        )
    })?;
    eprintln!("chaos seed {seed}: starting 3 nats-servers, 5 nodes and their proxies");
    let mut rig =
        rig::Rig::start(&toxiproxy).map_err(|e| ControlError::new(ErrorCode::Unavailable, e))?;
    let began = Instant::now();
    let began_unix_ms = unix_ms();
    let until = began + duration;

    let seen = Arc::new(Mutex::new(trees::Seen::default()));
    let target = trees::Target {
        url: rig.cluster.nats.url_list().join(","),
        cluster: rig.cluster.cluster.clone(),
        began,
        until,
    };
    let tree_clients: Vec<_> = (0..args.tree_clients)
        .map(|id| {
            let (target, seen) = (target.clone(), seen.clone());
            std::thread::spawn(move || trees::client(id, seed, 10_000, target, seen))
        })
        .collect();
    let registry_clients = {
        let (urls, cluster, n) = (
            rig.cluster.nats.url_list(),
            rig.cluster.cluster.clone(),
            args.registry_clients,
        );
        std::thread::spawn(move || registry::run(&urls, &cluster, seed, n, began, until))
    };

    let mut schedule = faults::Schedule::new(seed, kinds);
    let mut injected = Vec::new();
    while Instant::now() + Duration::from_secs(4) < until {
        std::thread::sleep(schedule.pause(500, 1000));
        let fault = schedule.next_fault();
        let done = schedule.inject(&mut rig, fault, began, Duration::from_secs(60));
        eprintln!(
            "chaos seed {seed}: {} on {} ({:.1} s), every node ready {}",
            fault.name(),
            done.target,
            (done.to_ns - done.from_ns) as f64 / 1e9,
            done.recovered
                .map(|d| format!("{:.2} s after the heal", d.as_secs_f64()))
                .unwrap_or_else(|| "NOT within 60 s".to_owned())
        );
        injected.push(done);
    }
    for c in tree_clients {
        let _ = c.join();
    }
    let history = registry_clients
        .join()
        .map_err(|_| internal("the registry clients stopped"))?
        .map_err(internal)?;
    eprintln!("chaos seed {seed}: faults over; checking");
    rig.cluster.wait_ready(Duration::from_secs(60));

    let seen = trees::lock(&seen);
    let mut violations = checks::check(&rig.cluster, &seen);
    let around = checks::faults_around(&rig.cluster, &violations, &injected, began_unix_ms);
    for f in &injected {
        if f.recovered.is_none() {
            violations.push(format!(
                "{} on {}: not every node was ready within 60 s of the heal",
                f.fault.name(),
                f.target
            ));
        }
    }
    let keep = std::env::temp_dir();
    let porcupine = match registry::check(&history, seed, &keep) {
        Ok((_, said)) => said,
        Err(said) => {
            violations.push(said.lines().next().unwrap_or("").to_owned());
            said
        }
    };
    let table = report::Report {
        seed,
        duration,
        seen: &seen,
        history: &history,
        injected: &injected,
        violations: &violations,
        porcupine: &porcupine,
    };
    table.print(json);
    if violations.is_empty() {
        Ok(())
    } else {
        let logs = keep.join(format!("lineage-chaos-{seed}-logs"));
        if std::fs::create_dir_all(&logs).is_ok() {
            for node in &rig.cluster.nodes {
                let _ = std::fs::copy(&node.log, logs.join(format!("{}.log", node.id)));
            }
            println!("node logs kept in {}", logs.display());
        }
        if !around.is_empty() {
            let slugs: Vec<&str> = around.iter().map(|f| f.slug()).collect();
            println!(
                "faults injected around the births of the sessions named above: {}; a smaller run to try: lineage chaos --seed {seed} --duration {} --faults {}",
                slugs.join(", "),
                args.duration,
                slugs.join(",")
            );
        }
        Err(internal(format!(
            "chaos seed {seed}: {} violation(s), listed above; repeat with `{repeat}`",
            violations.len()
        )))
    }
}
