//! `lineage bench` is covered by a short run of the built binary: the `baseline` scenario with
//! a scaled-down sample count (starts its own nats-server, no lineage nodes), the `tools`
//! scenario scaled down (its own cluster, the ACP test agent calling its MCP tools), and a
//! refused unknown scenario.

use std::process::Command;
use std::time::{Duration, Instant};

fn lineage() -> Command {
    let mut cmd = Command::new(lineage_testkit::lineage_bin());
    // The bench must start its own server, not reach for one named in the environment.
    cmd.env_remove("NATS_URL")
        .env_remove("LINEAGE_CLUSTER")
        .env("LINEAGE_BENCH_SCALE", "0.05");
    cmd
}

#[test]
fn bench_baseline_prints_percentiles_against_its_own_server() {
    let started = Instant::now();
    let out = lineage()
        .args(["bench", "baseline"])
        .output()
        .expect("run lineage bench baseline");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
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
    let out = lineage()
        .args(["bench", "tools"])
        .output()
        .expect("run lineage bench tools");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
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
