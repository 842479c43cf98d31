//! Issue 12 (G1, G3): the registry stays linearizable under kills and stops of its leader and
//! followers, checked by a checker this project did not write. `lineage chaos` restricted to
//! the registry's faults (SIGKILL + restart and SIGSTOP + SIGCONT of the leader and of a
//! follower), four registry clients and one tree client: the registry workload's history
//! (register roots and children, dispose, close admission, linearizable reads on shared trees)
//! goes to Porcupine (`tools/porcupine`, `github.com/anishathalye/porcupine`, with a model of
//! the registry's rules; its own tests run first), and every other check of `lineage chaos`
//! holds too. The workload and the checker live in `crates/lineage-lab/src/chaos/registry.rs`.
//!
//! `LINEAGE_CHAOS_SEED` (default 12) repeats a run; the history is kept in the system temp dir
//! (`lineage-chaos-<seed>-history.json`) for `go run ./tools/porcupine <file>`.

use lineage_testkit::cli::lineage_chaos;
use lineage_testkit::seeded::from_env;

#[test]
fn g1_g3_the_registry_stays_linearizable_under_kills_and_stops_checked_by_porcupine() {
    let seed: u64 = from_env("LINEAGE_CHAOS_SEED", 12);
    let Some(run) = lineage_chaos(&[
        "--seed",
        &seed.to_string(),
        "--duration",
        "40s",
        "--faults",
        "kill-leader,stop-leader,kill-follower,stop-follower",
        "--tree-clients",
        "1",
        "--registry-clients",
        "4",
    ]) else {
        return;
    };
    let report = run.report;
    assert!(
        run.passed,
        "seed {seed} (LINEAGE_CHAOS_SEED={seed} to repeat): {}",
        report["violations"]
    );
    let kinds: Vec<&str> = report["faults"]
        .as_array()
        .map(|f| f.iter().filter_map(|k| k["fault"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        kinds.len(),
        4,
        "the four registry faults, each at least once: {kinds:?}"
    );
    assert!(
        kinds.iter().all(|k| k.contains("registry")),
        "only registry faults: {kinds:?}"
    );
    let said = report["porcupine"].as_str().unwrap_or("");
    assert!(said.starts_with("linearizable:"), "{said}");
    assert!(
        report["registry_operations"].as_u64().unwrap_or(0) >= 500,
        "{report}"
    );
    assert!(
        report["registry_unknown"].as_u64().unwrap_or(u64::MAX) * 4
            < report["registry_operations"].as_u64().unwrap_or(0),
        "over a quarter of the operations have no outcome: {report}"
    );
}
