//! Issue 12 (X1, G1, G3, Z3, M2, N2, Q3): `lineage chaos`, the fault harness, run as an
//! operator would, on a short schedule (CI: about 75 s of faults, then the checks). It starts
//! its own cluster (a 3-server NATS cluster with R3 streams, 3 registry voters, 2 workers, every
//! node behind toxiproxy), runs the tree workload through the CLI and a registry workload whose
//! history Porcupine checks, and injects every fault kind at least once: SIGKILL and SIGSTOP of
//! the registry leader, a follower, a worker and a nats-server; latency, slicing, a byte limit
//! per connection, a blackhole, resets and a cut on one node's links. It exits 0 only when
//! every check passed (see `crates/lineage-lab/src/chaos/checks.rs`); its JSON report is checked
//! here for what a run must have done. Bad arguments get one line and exit 2.
//!
//! `LINEAGE_CHAOS_SEED` (default 12) picks the seed; `lineage chaos --duration 30m` runs long.

use std::process::Command;

use lineage_testkit::cli::lineage_chaos;
use lineage_testkit::lineage_bin;
use lineage_testkit::seeded::from_env;

/// The fault kinds `lineage chaos` knows (crates/lineage-lab/src/chaos/faults.rs).
const KINDS: usize = 14;

#[test]
fn x1_g1_lineage_chaos_keeps_every_promise_under_every_fault_kind() {
    let seed: u64 = from_env("LINEAGE_CHAOS_SEED", 12);
    let Some(run) = lineage_chaos(&["--seed", &seed.to_string(), "--duration", "75s"]) else {
        return;
    };
    let report = run.report;
    assert!(
        run.passed,
        "lineage chaos found violations (seed {seed}; LINEAGE_CHAOS_SEED={seed} to repeat): {}",
        report["violations"]
    );
    let kinds = report["faults"].as_array().map_or(0, Vec::len);
    assert_eq!(
        kinds, KINDS,
        "every fault kind injected at least once: {report}"
    );
    assert!(
        report["porcupine"]
            .as_str()
            .is_some_and(|p| p.starts_with("linearizable:")),
        "{report}"
    );
    for key in [
        "roots_acknowledged",
        "budgeted_roots",
        "roots_drained",
        "registry_operations",
    ] {
        assert!(report[key].as_u64().unwrap_or(0) > 0, "no {key}: {report}");
    }
    assert_eq!(report["violations"], serde_json::json!([]), "{report}");
}

#[test]
fn x1_lineage_chaos_refuses_bad_arguments_in_one_line() {
    for (args, says) in [
        (vec!["--duration", "5x"], "use s, m or h"),
        (vec!["--duration", "10s"], "at least 30s"),
        (vec!["--duration", "soon"], "is not a duration"),
        (vec!["--tree-clients", "0"], "give 1 to 16"),
        (vec!["--faults", "latency,nope"], "is not a fault kind"),
    ] {
        let out = Command::new(lineage_bin())
            .arg("chaos")
            .args(&args)
            .output()
            .expect("run lineage chaos");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
