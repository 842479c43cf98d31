//! Benchmark scenarios of `lineage bench SCENARIO`.
//!
//! Each scenario starts its own local cluster (nats-server and 3 `lineage node` processes, all
//! registry voters, the `lineage dev` configuration) in a temp dir, unless `--nats` (or
//! `NATS_URL`) names a running cluster: then it benchmarks that one, on its live nodes. Each
//! measures the raw NATS request-reply round trip on the same server first (the baseline), then
//! its workload, and prints p50/p90/p99, throughput and ratios to the baseline's p50. Each says
//! which JetStream `sync_interval` its server runs with (`always` for its own server).
//!
//! | scenario | workload |
//! |---|---|
//! | `baseline` | NATS request-reply echo only (no lineage nodes are started) |
//! | `registry` | register-child writes straight to the registry, 1 and 64 clients ([`lineage_registry::bench`]), on the voters' direct Raft links; then (own cluster) the same on a second cluster whose Raft goes through nats-server ([`registry`](mod@registry)) |
//! | `spawn` | a top-level parent on node 1 per worker; each request spawns a one-shot child on node 2 and returns once it settled; 1 and 64 parents; then (own cluster) both again with nats-server restarted at `sync_interval` 2m and at `always`, and the cost of `always` |
//! | `settle` | a continuable child on node 2 of a parent on node 1 settles after one turn: time from its `subagent/end` (published right after the settle commit) to the notice on the parent's inbox subject, and to the notice accepted into the parent's log |
//! | `resume` | continuable children with a 100-event log, settled (cold) on node 2, resumed on node 3 with `resume` |
//! | `drain` | 1,000 sessions (one tree), 10,000 (ten trees of 1,000) and 10,000 (one tree), depth 4, registered straight into the registry, placed over the 3 nodes with no live agent, drained end to end by one `drain` request |
//!
//! | `scale` | not in `all`: the registry at 1,000,000 sessions (trees of 1,000): register latency at 100k and 1M, RSS per session, snapshot size and build time, a follower's restart and its catch-up from a snapshot ([`scale`](mod@scale)) |
//! | `peers` | not in `all`: lineage next to Restate, Temporal, etcd and NATS KV on the same machine, one at a time (the peers installed by `scripts/bench-peers.sh`): a parent awaiting a one-shot child, a durable replicated write, 1 and 64 callers ([`peers`]) |
//! | `workspace` | not in `all` (issue 39): a 10 MB and a 100 MB tree packed, stored in the Object Store, read back and materialized ([`workspace`](mod@workspace)); a turn's checkpoint as a delta vs a whole snapshot vs a git bundle ([`checkpoint`](mod@checkpoint)); then a one-shot child on another node inheriting a 10 MB workspace vs an empty one ([`inherit`](mod@inherit)) |
//! | `tools` | a one-shot `echo` child on node 2 of a `delegator` session (the ACP test agent with `tools = true`) on node 1, one at a time: through `spawn_subagent` over MCP (timed by the agent: [`tools`]) vs through the control service |
//!
//! `LINEAGE_BENCH_SCALE` (default 1) multiplies every sample count (e.g. 0.05 for a smoke run).
//!
//! Each scenario but `baseline` lives in `scenarios/<name>.rs`; this file holds
//! the runner and what the scenarios share, `scenarios/setup.rs` the cluster setup ([`Bench`]).

mod checkpoint;
mod drain;
mod inherit;
mod peers;
mod registry;
mod resume;
mod scale;
mod settle;
mod setup;
mod spawn;
mod tools;
mod workspace;

use drain::drain;
use registry::registry;
use resume::resume;
use settle::settle;
use setup::Bench;
use spawn::{spawn, spawn_phase};

use std::time::{Duration, Instant};

use futures::StreamExt;
use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::{ControlClient, Subjects};
use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{NodeId, SessionId};
use lineage_protocol::control::{SpawnReply, SpawnRequest};
use lineage_protocol::{AgentSpec, Script, Step};

use lineage::global::Global;

/// Every scenario, in the order `all` runs them.
const SCENARIOS: [&str; 7] = [
    "baseline", "registry", "spawn", "settle", "resume", "drain", "tools",
];

/// Runs a scenario (`all`: each in turn; a failed one does not stop the others).
pub async fn run(g: &Global, scenario: &str) -> Result<(), ControlError> {
    print_machine();
    let list: Vec<&str> = if scenario == "all" {
        SCENARIOS.to_vec()
    } else {
        vec![scenario]
    };
    let mut failed: Vec<(String, ControlError)> = Vec::new();
    for name in list {
        println!();
        println!("== {name} ==");
        let started = Instant::now();
        let outcome = run_one(g, name).await;
        match outcome {
            Ok(()) => println!("({name}: {:.1?} with setup)", started.elapsed()),
            Err(e) => {
                println!("{name}: FAILED: {e}");
                failed.push((name.to_owned(), e));
            }
        }
    }
    match failed.first() {
        None => Ok(()),
        Some((_, first)) => {
            let names: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
            Err(ControlError::new(
                first.code,
                format!(
                    "bench scenario(s) {} failed; first: {}",
                    names.join(", "),
                    first.message
                ),
            ))
        }
    }
}

async fn run_one(g: &Global, name: &str) -> Result<(), ControlError> {
    if name == "peers" {
        return peers::peers(g).await;
    }
    let bench = Bench::setup(g, name != "baseline").await?;
    let outcome = match name {
        "baseline" => Ok(()),
        "registry" => registry(&bench).await,
        "spawn" => spawn(&bench).await,
        "settle" => settle(&bench).await,
        "resume" => resume(&bench).await,
        "drain" => drain(&bench).await,
        "tools" => tools::tools(&bench).await,
        "scale" => scale::scale(&bench).await,
        "workspace" => workspaces(&bench).await,
        other => Err(lineage::output::usage(format!(
            "unknown bench scenario {other:?}"
        ))),
    };
    bench.cleanup().await;
    outcome
}

/// `LINEAGE_BENCH_SCALE`, default 1.
fn scale() -> f64 {
    std::env::var("LINEAGE_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0)
}

/// `n` times the scale, at least 1.
fn scaled(n: usize) -> usize {
    ((n as f64 * scale()).round() as usize).max(1)
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> ControlError {
    ControlError::new(ErrorCode::Unavailable, format!("{what}: {e}"))
}

fn internal(what: impl Into<String>) -> ControlError {
    ControlError::new(ErrorCode::Internal, what)
}

/// Prints cores, CPU model, memory, kernel and build.
fn print_machine() {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |text: &str, key: &str| {
        text.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
    };
    let model = field(&cpuinfo, "model name").unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| field(&m, "MemTotal"))
        .unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    let build = if cfg!(debug_assertions) {
        "DEBUG build (figures are not representative; use --release)"
    } else {
        "release build"
    };
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into());
    println!(
        "machine: {cores} cores ({model}), memory {mem}, Linux {kernel}; load average {load} at start; {build}"
    );
    if (scale() - 1.0).abs() > f64::EPSILON {
        println!("LINEAGE_BENCH_SCALE={}: sample counts scaled", scale());
    }
}

/// Control requests from the bench process: the same [`ControlClient`] as the CLI's, plus its
/// connection and subjects for the subscriptions the scenarios time.
#[derive(Clone)]
struct Ctl {
    client: async_nats::Client,
    subjects: Subjects,
    control: ControlClient,
}

impl Ctl {
    /// Spawns on `via`'s per-node subject (the parent's node for a child).
    async fn spawn(
        &self,
        via: &NodeId,
        request: &SpawnRequest,
    ) -> Result<SpawnReply, ControlError> {
        self.control.on(via).spawn(request).await
    }

    /// A top-level scripted session on `node` (replies "done" to everything).
    async fn root(&self, node: &NodeId) -> Result<SessionId, ControlError> {
        let reply = self
            .spawn(node, &spawn_request(None, None, Script::done(), node))
            .await?;
        Ok(reply.session)
    }
}

fn spawn_request(
    parent: Option<&SessionId>,
    shape: Option<SubagentShape>,
    script: Script,
    node: &NodeId,
) -> SpawnRequest {
    SpawnRequest {
        parent: parent.cloned(),
        shape,
        node: Some(node.clone()),
        ..SpawnRequest::new(AgentSpec::Script { script }, "go")
    }
}

/// A script whose first turn replies `replies` times.
fn replies(replies: usize) -> Script {
    Script {
        turns: vec![(0..replies)
            .map(|i| Step::Reply {
                content: format!("r{i}"),
            })
            .collect()],
        ..Script::default()
    }
}

/// The bench's connection. Its request timeout is raised from async-nats' default of 10 s,
/// which would otherwise cut every control request (a drain of 10,000 sessions) at 10 s
/// whatever timeout the request asks for.
async fn connect(url: &str) -> Result<async_nats::Client, ControlError> {
    let connect = async_nats::ConnectOptions::new()
        .name("lineage-bench")
        .request_timeout(Some(Duration::from_secs(300)))
        .connect(url);
    tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| {
            unavailable(
                &format!("cannot connect to NATS at {url}"),
                "no answer within 5 s",
            )
        })?
        .map_err(|e| unavailable(&format!("cannot connect to NATS at {url}"), e))
}

/// Messages arriving on core NATS subjects, stamped on arrival.
struct Arrivals {
    rx: tokio::sync::mpsc::UnboundedReceiver<(usize, async_nats::Message, Instant)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Arrivals {
    async fn subscribe(
        client: &async_nats::Client,
        subjects: &[String],
    ) -> Result<Self, ControlError> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (i, subject) in subjects.iter().enumerate() {
            let mut sub = client
                .subscribe(subject.clone())
                .await
                .map_err(|e| unavailable(&format!("cannot subscribe to {subject}"), e))?;
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(msg) = sub.next().await {
                    if tx.send((i, msg, Instant::now())).is_err() {
                        break;
                    }
                }
            }));
        }
        client
            .flush()
            .await
            .map_err(|e| unavailable("cannot flush subscriptions", e))?;
        Ok(Arrivals { rx, tasks })
    }

    async fn next(&mut self, deadline: Instant) -> Option<(usize, async_nats::Message, Instant)> {
        tokio::time::timeout_at(deadline.into(), self.rx.recv())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for Arrivals {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// `lineage bench`.
pub async fn bench(g: &Global, scenario: &str) -> Result<(), ControlError> {
    let known = [
        "baseline",
        "registry",
        "spawn",
        "settle",
        "resume",
        "drain",
        "tools",
        "scale",
        "peers",
        "workspace",
        "all",
    ];
    if !known.contains(&scenario) {
        return Err(lineage::output::usage(format!(
            "unknown bench scenario {scenario:?}; pick one of {}",
            known.join(", ")
        )));
    }
    if scenario == "scale" && g.nats.is_some() {
        return Err(lineage::output::usage(
            "`lineage bench scale` registers a million sessions: it runs only on a cluster of its own; drop --nats (and NATS_URL)",
        ));
    }
    // `spawn` and `tools` run the ACP test agent beside `lineage`: without it the cluster offers
    // no `delegator` profile, and the run would stop halfway with "unknown agent profile".
    if matches!(scenario, "spawn" | "tools" | "all") {
        let agent = lineage::dev::lineage_program()
            .map(|exe| exe.with_file_name("lineage-acp-testagent"))
            .ok()
            .filter(|p| p.is_file());
        if agent.is_none() {
            return Err(lineage::output::usage(format!(
                "`lineage bench {scenario}` runs the ACP test agent, which is not beside lineage; build it the same way, e.g. cargo build --release -p lineage-acp-testagent"
            )));
        }
    }
    run(g, scenario).await
}

/// `workspace`: the store's figures, the checkpoint formats, then inheriting across nodes.
async fn workspaces(bench: &Bench) -> Result<(), ControlError> {
    workspace::workspace(bench).await?;
    checkpoint::checkpoint(bench).await?;
    inherit::inherit(bench).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_script_has_one_turn_of_n_replies() {
        let s = replies(3);
        assert_eq!(s.turns.len(), 1);
        assert_eq!(s.turns[0].len(), 3);
    }
}
