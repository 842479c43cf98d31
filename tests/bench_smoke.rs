//! `lineage bench` is covered by a short run of the built binary: the `baseline` scenario with
//! a scaled-down sample count (starts its own nats-server, no lineage nodes), the `tools`
//! scenario scaled down (its own cluster, the ACP test agent calling its MCP tools), the
//! `registry` scenario (direct Raft links against Raft through NATS), and a refused unknown
//! scenario.

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The benchmarks start clusters and load them: one at a time, so a test thread beside them
/// cannot starve them (the scale smoke's follower, a debug build catching up 10,000 sessions
/// with 50 ms Raft timeouts, never caught up once when the tools bench ran beside it).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn lineage() -> Command {
    lineage_testkit::lab_bin();
    let mut cmd = Command::new(lineage_testkit::lineage_bin());
    // The bench must start its own server, not reach for one named in the environment.
    cmd.env_remove("NATS_URL")
        .env_remove("LINEAGE_CLUSTER")
        .env("LINEAGE_BENCH_SCALE", "0.05");
    cmd
}

/// Runs `lineage bench <scenario>` (scaled down) and returns its output, once it succeeded.
fn bench(scenario: &str) -> String {
    let out = lineage()
        .args(["bench", scenario])
        .output()
        .unwrap_or_else(|e| panic!("run lineage bench {scenario}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}

#[test]
fn bench_baseline_prints_percentiles_against_its_own_server() {
    let _serial = one_at_a_time();
    let started = Instant::now();
    let stdout = bench("baseline");
    assert!(stdout.starts_with("machine: "), "{stdout}");
    assert!(stdout.contains("cores"), "{stdout}");
    assert!(stdout.contains("== baseline =="), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("nats request-reply (baseline)"))
        .unwrap_or_else(|| panic!("no baseline line in:\n{stdout}"));
    for field in ["n=100", "p50=", "p90=", "p99=", "/s", "x baseline"] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn bench_refuses_an_unknown_scenario_with_a_usage_error() {
    let out = lineage()
        .args(["bench", "nope"])
        .output()
        .expect("run lineage bench nope");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown bench scenario"), "{stderr}");
    assert!(stderr.contains("baseline"), "{stderr}");
}

#[test]
fn t1_bench_tools_measures_the_tool_path_against_the_control_service_in_one_run() {
    let _serial = one_at_a_time();
    let stdout = bench("tools");
    for name in [
        "nats request-reply (baseline)",
        "spawn one-shot via the control service",
        "spawn one-shot via the MCP tool over stdio",
        "spawn one-shot via the MCP tool over HTTP",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{stdout}"));
        for field in ["n=10", "p50=", "p99=", "x baseline"] {
            assert!(line.contains(field), "{field} missing in {line}");
        }
    }
    for transport in ["stdio", "HTTP"] {
        assert!(
            stdout.contains(&format!("the tool path over {transport} adds")),
            "no comparison for {transport} in:\n{stdout}"
        );
    }
}

/// Issue 35: `bench registry` measures the writes on the voters' direct Raft links and, in the
/// same run, on a second cluster whose Raft goes through NATS, and prints the difference.
#[test]
fn g1_bench_registry_measures_direct_raft_links_against_raft_through_nats_in_one_run() {
    let _serial = one_at_a_time();
    let stdout = bench("registry");
    for name in [
        "register child, 1 client ",
        "register child, 64 clients ",
        "register child, 1 client, Raft through NATS ",
        "register child, 64 clients, Raft through NATS ",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name:?} line in:\n{stdout}"));
        for field in ["p50=", "p99=", "/s", "x baseline"] {
            assert!(line.contains(field), "{field} missing in {line}");
        }
    }
    let compared = stdout
        .lines()
        .find(|l| l.starts_with("direct Raft links vs Raft through NATS: 1 client p50 "))
        .unwrap_or_else(|| panic!("no comparison in:\n{stdout}"));
    assert!(
        compared.contains(" ms (") && compared.contains("writes/s"),
        "{compared}"
    );
}

/// Issue 13 (scale), scaled down to 10,000 sessions: every figure the full run reports is
/// printed, and the lagging follower catches up by installing a snapshot (not from the log).
#[test]
fn q_scale_bench_reports_memory_snapshots_restart_and_a_snapshot_catch_up() {
    let _serial = one_at_a_time();
    let out = lineage()
        .env("LINEAGE_BENCH_SCALE", "0.01")
        .args(["bench", "scale"])
        .output()
        .expect("run lineage bench scale");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for name in [
        "register child, 1 client at ",
        "register child, 64 clients at ",
    ] {
        let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with(name)).collect();
        assert_eq!(
            lines.len(),
            2,
            "one {name:?} line per checkpoint in:\n{stdout}"
        );
        for line in lines {
            for field in ["p50=", "p99=", "x baseline"] {
                assert!(line.contains(field), "{field} missing in {line}");
            }
        }
    }
    for needle in [
        "B per session",
        // Measured only with a results window of at most 2 minutes (a minute's wait); here
        // the line says why not.
        "-- settled: ",
        "last snapshot built",
        "load at open (read the snapshot, rebuild the state)",
        "snapshot installed in",
    ] {
        assert!(stdout.contains(needle), "no {needle:?} in:\n{stdout}");
    }
    assert!(
        !stdout.contains("caught up from the log"),
        "the lagging follower should have installed a snapshot:\n{stdout}"
    );
}

#[test]
fn q_scale_bench_refuses_a_given_cluster() {
    let out = lineage()
        .args(["--nats", "nats://127.0.0.1:4222", "bench", "scale"])
        .output()
        .expect("run lineage bench scale --nats");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cluster of its own"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
