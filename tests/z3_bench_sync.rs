//! Z3: `lineage bench` says which JetStream `sync_interval` it ran with, and `bench spawn`
//! measures the spawn workloads at nats-server's default (2m) and at `always` in the same run
//! (its own nats-server restarted with each) and prints the cost. A scaled-down run of the
//! built binary.

use std::process::Command;

#[test]
fn z3_bench_spawn_states_its_sync_interval_and_the_cost_of_always() {
    lineage_testkit::lab_bin();
    let out = Command::new(lineage_testkit::lineage_bin())
        .env_remove("NATS_URL")
        .env_remove("LINEAGE_CLUSTER")
        .env("LINEAGE_BENCH_SCALE", "0.05")
        .args(["bench", "spawn"])
        .output()
        .expect("run lineage bench spawn");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(
            "JetStream sync_interval: always (every stream write is fsync'd before its ack)"
        ),
        "{stdout}"
    );
    for sync in ["2m", "always"] {
        for phase in ["1 parent", "64 parents"] {
            let label = format!("spawn one-shot, {phase}, sync {sync}");
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&label))
                .unwrap_or_else(|| panic!("no {label:?} line in:\n{stdout}"));
            for field in ["n=", "p50=", "p99=", "/s"] {
                assert!(line.contains(field), "{field} missing in {line}");
            }
        }
    }
    for phase in ["1 parent", "64 parents"] {
        let label = format!("cost of sync_interval always, spawn one-shot, {phase}: p50 ");
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&label))
            .unwrap_or_else(|| panic!("no {label:?} line in:\n{stdout}"));
        assert!(
            line.contains(" ms (") && line.contains("throughput"),
            "{line}"
        );
    }
}
