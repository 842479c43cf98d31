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
//! | `registry` | register-child writes straight to the registry, 1 and 64 clients ([`lineage_registry::bench`]) |
//! | `spawn` | a top-level parent on node 1 per worker; each request spawns a one-shot child on node 2 and returns once it settled; 1 and 64 parents; then (own cluster) both again with nats-server restarted at `sync_interval` 2m and at `always`, and the cost of `always` |
//! | `settle` | a continuable child on node 2 of a parent on node 1 settles after one turn: time from its `subagent/end` (published right after the settle commit) to the notice on the parent's inbox subject, and to the notice accepted into the parent's log |
//! | `resume` | continuable children with a 100-event log, settled (cold) on node 2, resumed on node 3 with `resume` |
//! | `drain` | 1,000 sessions (one tree), 10,000 (ten trees of 1,000) and 10,000 (one tree), depth 4, registered straight into the registry, placed over the 3 nodes with no live agent, drained end to end by one `drain` request |
//!
//! | `scale` | not in `all`: the registry at 1,000,000 sessions (trees of 1,000): register latency at 100k and 1M, RSS per session, snapshot size and build time, a follower's restart and its catch-up from a snapshot ([`scale`]) |
//! | `peers` | not in `all`: lineage next to Restate, Temporal, etcd and NATS KV on the same machine, one at a time (the peers installed by `scripts/bench-peers.sh`): a parent awaiting a one-shot child, a durable replicated write, 1 and 64 callers ([`peers`]) |
//! | `tools` | a one-shot `echo` child on node 2 of a `delegator` session (the ACP test agent with `tools = true`) on node 1, one at a time: through `spawn_subagent` over MCP (timed by the agent: [`tools`]) vs through the control service |
//!
//! `LINEAGE_BENCH_SCALE` (default 1) multiplies every sample count (e.g. 0.05 for a smoke run).

mod peers;
mod scale;
mod tools;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::{ControlClient, Subjects};
use lineage_core::descriptor::{SubagentDescriptor, SubagentShape};
use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_core::messages::{InboxMessage, LifecycleEvent, StopReason};
use lineage_protocol::control::{ResumeOutcome, SpawnReply, SpawnRequest};
use lineage_protocol::{AgentSpec, Script, Step};
use lineage_registry::bench::RegisterBench;
use lineage_registry::client::NewSession;
use lineage_registry::{Consistency, RegistryClient, SessionState};

use crate::bench::{concurrent, nats_round_trips, report, Samples};
use crate::cli::Global;
use crate::dev::DevCluster;

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
        other => Err(crate::output::usage(format!(
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
        agent: AgentSpec::Script { script },
        prompt: "go".to_owned(),
        node: Some(node.clone()),
        label: None,
        persona: None,
        tool_filter: None,
        max_depth: None,
        request_id: None,
        cwd: None,
        preset: None,
        policy: None,
        timeout_ms: None,
        budget: None,
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

/// One scenario's environment: the cluster (own or given), the baseline measured on its server.
struct Bench {
    ctl: Ctl,
    registry: RegistryClient,
    /// Three nodes (repeated when the given cluster has fewer live ones).
    nodes: Vec<NodeId>,
    baseline: Samples,
    /// A directory on the disk the registry writes to (own cluster), else a temp dir.
    scratch: PathBuf,
    /// Whether the cluster is the bench's own (dropped afterwards) or a given one.
    external: bool,
    /// Top-level sessions created in a given cluster, drained at the end.
    roots: Mutex<Vec<SessionId>>,
    /// The bench's own cluster (its nats-server is restarted by the sync phase of `spawn`).
    cluster: tokio::sync::Mutex<Option<DevCluster>>,
    _server: Option<lineage_testkit::NatsServer>,
    _scratch: Option<tempfile::TempDir>,
}

impl Bench {
    async fn setup(g: &Global, with_nodes: bool) -> Result<Bench, ControlError> {
        let cluster_name = crate::cmd::cluster(g);
        let subjects = crate::cmd::subjects(g)?;
        let temp = || {
            tempfile::Builder::new()
                .prefix("lineage-bench-")
                .tempdir()
                .map_err(|e| internal(format!("cannot create a temp dir: {e}")))
        };
        let (client, cluster, server, scratch, scratch_dir) = if let Some(url) = &g.nats {
            let client = connect(url).await?;
            let t = temp()?;
            (client, None, None, t.path().to_path_buf(), Some(t))
        } else if with_nodes {
            println!("starting nats-server and 3 lineage nodes (release build of this binary) ...");
            let cluster = DevCluster::start(3, None, None, &cluster_name).await?;
            let client = connect(&cluster.nats.url()).await?;
            let dir = cluster.dir.clone();
            (client, Some(cluster), None, dir, None)
        } else {
            let server = lineage_testkit::NatsServer::start()
                .map_err(|e| unavailable("cannot start nats-server", e))?;
            let client = connect(&server.url()).await?;
            let t = temp()?;
            (client, None, Some(server), t.path().to_path_buf(), Some(t))
        };
        let info = client.server_info();
        println!(
            "server: nats-server {} ({}), cluster {cluster_name}{}",
            info.version,
            if g.nats.is_some() {
                "given with --nats"
            } else {
                "started for this scenario"
            },
            cluster
                .as_ref()
                .map(|c| format!(", data and logs in {}", c.dir.display()))
                .unwrap_or_default()
        );
        let sync = cluster
            .as_ref()
            .map(|c| c.nats.options().sync_interval.clone())
            .or_else(|| server.as_ref().map(|s| s.options().sync_interval.clone()));
        println!("{}", sync_statement(sync.as_deref()));
        let registry = RegistryClient::new(client.clone(), cluster_name.clone());
        let nodes = if !with_nodes {
            Vec::new()
        } else if let Some(c) = &cluster {
            c.nodes
                .iter()
                .map(|n| NodeId::parse(&n.id).map_err(|e| internal(e.to_string())))
                .collect::<Result<_, _>>()?
        } else {
            let now = crate::cmd::now_ms();
            let mut live: Vec<NodeId> = registry
                .nodes(Consistency::Linearizable)
                .await
                .map_err(|e| unavailable("cannot list the cluster's nodes", e))?
                .into_iter()
                .filter(|n| n.lease_expires_at_ms > now)
                .map(|n| n.node)
                .collect();
            live.sort();
            if live.is_empty() {
                return Err(unavailable(
                    "no live node in the given cluster",
                    "start nodes first (lineage dev)",
                ));
            }
            let all: Vec<NodeId> = (0..3).map(|i| live[i % live.len()].clone()).collect();
            all
        };
        if !nodes.is_empty() {
            let names: Vec<&str> = nodes.iter().map(|n| n.as_str()).collect();
            println!("nodes: {}", names.join(", "));
        }
        // The baseline, on the same server, after a warm-up.
        nats_round_trips(&client, 100).await?;
        let baseline = nats_round_trips(&client, scaled(2000)).await?;
        report("nats request-reply (baseline)", &baseline, &baseline);
        Ok(Bench {
            ctl: Ctl {
                control: ControlClient::new(
                    client.clone(),
                    subjects.clone(),
                    Duration::from_millis(g.timeout_ms.max(30_000)),
                ),
                client,
                subjects,
            },
            registry,
            nodes,
            baseline,
            scratch,
            external: g.nats.is_some(),
            roots: Mutex::new(Vec::new()),
            cluster: tokio::sync::Mutex::new(cluster),
            _server: server,
            _scratch: scratch_dir,
        })
    }

    fn node(&self, i: usize) -> &NodeId {
        &self.nodes[i % self.nodes.len()]
    }

    /// A top-level session on `node`, remembered for cleanup in a given cluster.
    async fn root(&self, node: &NodeId) -> Result<SessionId, ControlError> {
        let root = self.ctl.root(node).await?;
        if let Ok(mut roots) = self.roots.lock() {
            roots.push(root.clone());
        }
        Ok(root)
    }

    fn report(&self, name: &str, s: &Samples) {
        report(name, s, &self.baseline);
    }

    /// In a given cluster, drains what the scenario created (best effort).
    async fn cleanup(&self) {
        let roots = self.roots.lock().map(|r| r.clone()).unwrap_or_default();
        if !self.external || roots.is_empty() {
            return;
        }
        let outcome = self
            .ctl
            .control
            .with_timeout(Duration::from_secs(120))
            .drain(roots)
            .await;
        if let Err(e) = outcome {
            println!("warning: cannot drain the sessions this scenario created: {e}");
        }
    }
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

/// `registry`: register-child writes, 1 and 64 clients, against the cluster's 3 voters.
async fn registry(b: &Bench) -> Result<(), ControlError> {
    let fsync = lineage_registry::bench::fsync_probe(&b.scratch, scaled(200))
        .map_err(|e| internal(format!("fsync probe in {}: {e}", b.scratch.display())))?;
    b.report(
        "raw fsync (512 B append), same disk",
        &Samples {
            latencies: fsync.latencies,
            wall: fsync.wall,
        },
    );
    // The bench client is a "hosting node": its own connection.
    let work = RegisterBench::new(
        b.registry.clone(),
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
    for (name, ops, clients) in [
        ("register child, 1 client", scaled(800), 1usize),
        ("register child, 64 clients", scaled(6400).max(64), 64),
    ] {
        let batch = work
            .run_batch(ops as u64, clients)
            .await
            .map_err(|e| unavailable(name, e))?;
        b.report(
            name,
            &Samples {
                latencies: batch.latencies,
                wall: batch.wall,
            },
        );
    }
    Ok(())
}

/// What the bench says about the JetStream sync it runs with (`None`: a server it did not
/// start, whose config it cannot read).
fn sync_statement(sync: Option<&str>) -> String {
    match sync {
        Some("always") => "JetStream sync_interval: always (every stream write is fsync'd before its ack)".to_owned(),
        Some(other) => format!("JetStream sync_interval: {other} (acknowledged stream writes are fsync'd at most every {other})"),
        None => "JetStream sync_interval: not known (a server given with --nats: see its config; lineage's shipped config sets always)".to_owned(),
    }
}

/// `spawn`: a one-shot child on node 2 of a parent on node 1, settled when the reply comes;
/// then (own cluster only) the same with nats-server's `sync_interval` at its default (2m)
/// and at `always`, the server restarted between them, and the cost of `always`.
async fn spawn(b: &Bench) -> Result<(), ControlError> {
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    println!("one-shot child on {cn} of a top-level parent on {pn}; the spawn request goes to {pn} and returns the settled child's result");
    for (name, parents, ops) in SPAWN_PHASES {
        let samples = spawn_phase(b, parents, ops).await?;
        b.report(name, &samples);
    }
    sync_cost(b).await
}

/// The two spawn workloads: name, parents (= concurrent workers), spawns.
const SPAWN_PHASES: [(&str, usize, usize); 2] = [
    ("spawn one-shot, 1 parent", 1, 200),
    ("spawn one-shot, 64 parents", 64, 640),
];

/// One spawn workload: `parents` top-level parents on node 1, `ops` (scaled) one-shot
/// children on node 2 by `parents` concurrent workers, after one warm-up spawn per parent.
async fn spawn_phase(b: &Bench, parents: usize, ops: usize) -> Result<Samples, ControlError> {
    let ops = scaled(ops).max(parents);
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    let mut roots = Vec::with_capacity(parents);
    for _ in 0..parents {
        roots.push(b.root(&pn).await?);
    }
    let roots = Arc::new(roots);
    let op = {
        let ctl = b.ctl.clone();
        let roots = roots.clone();
        move |i: usize| {
            let ctl = ctl.clone();
            let (pn, cn) = (pn.clone(), cn.clone());
            let parent = roots[i % roots.len()].clone();
            async move {
                let request = spawn_request(
                    Some(&parent),
                    Some(SubagentShape::OneShot),
                    Script::done(),
                    &cn,
                );
                let reply = ctl.spawn(&pn, &request).await?;
                match reply.result {
                    Some(r) if r.stop_reason == StopReason::Completed => Ok(()),
                    other => Err(internal(format!(
                        "one-shot child {} did not complete: {other:?}",
                        reply.session
                    ))),
                }
            }
        }
    };
    // Warm up: one spawn per parent.
    concurrent(parents, parents, op.clone()).await?;
    concurrent(ops, parents, op).await
}

/// The sync phase of `spawn`: restarts the bench's own nats-server (same port and store) with
/// `sync_interval` 2m (nats-server's default), then `always`, measures both spawn workloads
/// after each restart, and prints what `always` costs.
async fn sync_cost(b: &Bench) -> Result<(), ControlError> {
    let mut guard = b.cluster.lock().await;
    let Some(cluster) = guard.as_mut() else {
        println!("sync_interval 2m vs always: skipped (the server is given with --nats; the bench restarts only its own)");
        return Ok(());
    };
    println!("sync_interval 2m vs always: the same workloads, nats-server restarted (same port and store) with each");
    let mut results: Vec<(&str, Vec<Samples>)> = Vec::new();
    for sync in ["2m", "always"] {
        let options = lineage_testkit::NatsOptions {
            sync_interval: sync.to_owned(),
            ..cluster.nats.options().clone()
        };
        tokio::task::block_in_place(|| cluster.nats.restart_with(options))
            .map_err(|e| unavailable("cannot restart nats-server", e))?;
        cluster.wait_ready(Duration::from_secs(60)).await?;
        wait_spawns(b).await?;
        let mut phases = Vec::new();
        for (name, parents, ops) in SPAWN_PHASES {
            let samples = spawn_phase(b, parents, ops).await?;
            b.report(&format!("{name}, sync {sync}"), &samples);
            phases.push(samples);
        }
        results.push((sync, phases));
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    if let [(_, lazy), (_, always)] = &results[..] {
        for (((name, _, _), lazy), always) in SPAWN_PHASES.iter().zip(lazy).zip(always) {
            let (p50a, p50l) = (ms(always.p50()), ms(lazy.p50()));
            let (p99a, p99l) = (ms(always.p99()), ms(lazy.p99()));
            println!(
                "cost of sync_interval always, {name}: p50 {p50a:.3} vs {p50l:.3} ms ({:+.3} ms, {:+.0}%), p99 {p99a:.3} vs {p99l:.3} ms ({:+.3} ms), throughput {:.0} vs {:.0} /s",
                p50a - p50l,
                100.0 * (p50a - p50l) / p50l.max(1e-9),
                p99a - p99l,
                always.throughput(),
                lazy.throughput(),
            );
        }
    }
    Ok(())
}

/// After a nats-server restart: waits (up to 30 s) until a spawn goes through again (the nodes
/// reconnected, the registry has a leader).
async fn wait_spawns(b: &Bench) -> Result<(), ControlError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    loop {
        let attempt = async {
            let root = b.root(&pn).await?;
            let request = spawn_request(
                Some(&root),
                Some(SubagentShape::OneShot),
                Script::done(),
                &cn,
            );
            b.ctl.spawn(&pn, &request).await
        }
        .await;
        match attempt {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "spawn not served yet after the restart");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => {
                return Err(unavailable(
                    "no spawn within 30 s of the nats-server restart",
                    e,
                ))
            }
        }
    }
}

/// `settle`: settlement delivery from a child on node 2 to its parent on node 1.
async fn settle(b: &Bench) -> Result<(), ControlError> {
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    let parent = b.root(&pn).await?;
    let subjects = &b.ctl.subjects;
    let mut arrivals = Arrivals::subscribe(
        &b.ctl.client,
        &[
            subjects.parent_end(&parent),
            subjects.parent_inbox(&parent),
            subjects.session_events(&parent),
        ],
    )
    .await?;
    println!("continuable child on {cn} (one turn, then it settles) of a top-level parent on {pn}; clock: arrivals at the bench process, from the child's subagent/end (published right after the settle commit)");
    let n = scaled(200) + 5;
    let mut published = Vec::new();
    let mut accepted = Vec::new();
    let mut seen: HashMap<String, [Option<Instant>; 3]> = HashMap::new();
    let start = Instant::now();
    for i in 0..n {
        let reply = b
            .ctl
            .spawn(
                &pn,
                &spawn_request(
                    Some(&parent),
                    Some(SubagentShape::Continuable),
                    replies(1),
                    &cn,
                ),
            )
            .await?;
        let child = reply.session.to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some([Some(end), Some(inbox), Some(acc)]) = seen.get(&child).copied() {
                // The first five are a warm-up.
                if i >= 5 {
                    published.push(inbox.saturating_duration_since(end));
                    accepted.push(acc.saturating_duration_since(end));
                }
                break;
            }
            let Some((which, msg, at)) = arrivals.next(deadline).await else {
                return Err(internal(format!(
                    "child {child}: settlement not seen within 20 s (end, inbox, accepted: {:?})",
                    seen.get(&child)
                )));
            };
            let sender = match which {
                0 => match LifecycleEvent::decode(&msg.payload) {
                    Ok(LifecycleEvent::End(e)) => Some(e.child_id.to_string()),
                    _ => None,
                },
                1 => match InboxMessage::decode(&msg.payload) {
                    Ok(InboxMessage::Settled(s)) => Some(s.sender_session_id.to_string()),
                    _ => None,
                },
                _ => accepted_sender(&msg.payload),
            };
            if let Some(sender) = sender {
                seen.entry(sender).or_default()[which] = Some(at);
            }
        }
    }
    let wall = start.elapsed();
    b.report(
        "settle: notice on parent inbox subj",
        &Samples {
            latencies: published,
            wall,
        },
    );
    b.report(
        "settle: notice accepted by parent",
        &Samples {
            latencies: accepted,
            wall,
        },
    );
    println!(
        "(throughput above: one child at a time, spawn included; latencies exclude the spawn)"
    );
    Ok(())
}

/// The sender of a settlement notice a parent accepted into its log (`inbox/accepted`).
fn accepted_sender(payload: &[u8]) -> Option<String> {
    let events = lineage_bus::events::decode_log_message(payload).ok()?;
    let event = events.iter().find(|e| e.kind == "inbox/accepted")?;
    let data = &event.data;
    if data.get("message")?.get("kind")?.as_str()? != "subagent-settled" {
        return None;
    }
    let dedup = data.get("dedup_id")?.as_str()?;
    dedup.rsplit_once('-').map(|(sender, _)| sender.to_owned())
}

/// `resume`: cold resume of continuable children with a 100-event log.
async fn resume(b: &Bench) -> Result<(), ControlError> {
    const LOG_EVENTS: usize = 100;
    let (pn, cn, rn) = (b.node(0).clone(), b.node(1).clone(), b.node(2).clone());
    let parent = b.root(&pn).await?;
    let mut arrivals =
        Arrivals::subscribe(&b.ctl.client, &[b.ctl.subjects.parent_inbox(&parent)]).await?;
    let events =
        lineage_bus::events::EventLogStore::open(b.ctl.client.clone(), b.ctl.subjects.clone())
            .await
            .map_err(ControlError::from)?;
    let mut settled: HashSet<String> = HashSet::new();
    // Calibrate: how many events a one-reply child logs, so the real ones hold exactly 100.
    let probe = b
        .ctl
        .spawn(
            &pn,
            &spawn_request(
                Some(&parent),
                Some(SubagentShape::Continuable),
                replies(1),
                &cn,
            ),
        )
        .await?;
    wait_settled(&mut arrivals, &mut settled, &[probe.session.to_string()]).await?;
    let base = events
        .read(&probe.session)
        .await
        .map_err(ControlError::from)?
        .0
        .len();
    let reply_steps = (LOG_EVENTS + 1).saturating_sub(base).max(1);
    // Build the children: continuable, on node 2, one turn of `reply_steps` replies, settled.
    let n = scaled(200);
    let children: Arc<Mutex<Vec<SessionId>>> = Arc::default();
    let build = Instant::now();
    concurrent(n, 8, {
        let ctl = b.ctl.clone();
        let children = children.clone();
        let (parent, pn, cn) = (parent.clone(), pn.clone(), cn.clone());
        move |_| {
            let ctl = ctl.clone();
            let children = children.clone();
            let request = spawn_request(
                Some(&parent),
                Some(SubagentShape::Continuable),
                replies(reply_steps),
                &cn,
            );
            let pn = pn.clone();
            async move {
                let reply = ctl.spawn(&pn, &request).await?;
                if let Ok(mut c) = children.lock() {
                    c.push(reply.session);
                }
                Ok(())
            }
        }
    })
    .await?;
    let children: Vec<SessionId> = children.lock().map(|c| c.clone()).unwrap_or_default();
    let ids: Vec<String> = children.iter().map(|c| c.to_string()).collect();
    wait_settled(&mut arrivals, &mut settled, &ids).await?;
    let first = children.first().ok_or_else(|| internal("no child built"))?;
    let logged = events
        .read(first)
        .await
        .map_err(ControlError::from)?
        .0
        .len();
    println!(
        "built {} settled (cold) continuable children on {cn} in {:.1?}, {logged} log events each; resuming each on {rn} with `resume`",
        children.len(),
        build.elapsed()
    );
    // For comparison: the log read alone (what every resume does first), from this process.
    let mut reads = Vec::new();
    let start = Instant::now();
    for child in children.iter().take(scaled(50)) {
        let t = Instant::now();
        events.read(child).await.map_err(ControlError::from)?;
        reads.push(t.elapsed());
    }
    b.report(
        &format!("  (read a {logged}-event log alone)"),
        &Samples {
            latencies: reads,
            wall: start.elapsed(),
        },
    );
    // Resume each, one at a time, on node 3.
    let mut latencies = Vec::with_capacity(children.len());
    let start = Instant::now();
    for child in &children {
        let t = Instant::now();
        let reply = b.ctl.control.on(&rn).resume(child.clone()).await?;
        latencies.push(t.elapsed());
        if reply.outcome != ResumeOutcome::Resumed {
            return Err(internal(format!(
                "child {child} was not cold: {:?}",
                reply.outcome
            )));
        }
    }
    b.report(
        &format!("cold resume, {logged}-event log"),
        &Samples {
            latencies,
            wall: start.elapsed(),
        },
    );
    Ok(())
}

/// Waits until every child in `children` sent its settlement notice (seen on the inbox subject).
async fn wait_settled(
    arrivals: &mut Arrivals,
    settled: &mut HashSet<String>,
    children: &[String],
) -> Result<(), ControlError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let missing = children.iter().filter(|c| !settled.contains(*c)).count();
        if missing == 0 {
            return Ok(());
        }
        let Some((_, msg, _)) = arrivals.next(deadline).await else {
            return Err(internal(format!(
                "{missing} children did not settle within 120 s"
            )));
        };
        if let Ok(InboxMessage::Settled(s)) = InboxMessage::decode(&msg.payload) {
            settled.insert(s.sender_session_id.to_string());
        }
    }
}

/// `drain`: trees registered straight into the registry, drained end to end.
async fn drain(b: &Bench) -> Result<(), ControlError> {
    println!("trees registered straight into the registry (depth 4, placements round-robin over the 3 nodes, state running, no live agents: each node's stop/release finds nothing live); timed: one `drain` request naming the roots, sent to node-1, from send to reply (close admission, per-node stop and release, one registry dispose per session, 64 in flight per wave, leaves first; subtrees read in pages)");
    let each = scaled(1_000).max(10);
    // One tree, ten trees, then one tree as large as the ten (its subtree is read in pages).
    for (trees, per_tree) in [(1usize, each), (10, each), (1, 10 * each)] {
        let size = trees * per_tree;
        let built = Instant::now();
        let (roots, depth) = build_forest(b, trees, per_tree).await?;
        println!(
            "{trees} tree(s) of {per_tree} sessions ({size} in all), depth {depth}, registered in {:.1?}",
            built.elapsed()
        );
        drain_roots(
            b,
            &format!("drain {size} sessions ({trees} root(s))"),
            roots,
            size,
        )
        .await?;
    }
    Ok(())
}

/// One `drain` request of `roots`, timed to its reply; when the reply is lost, timed to the
/// moment the last root is disposed (polled every 50 ms) instead, and said so.
async fn drain_roots(
    b: &Bench,
    name: &str,
    roots: Vec<SessionId>,
    size: usize,
) -> Result<(), ControlError> {
    let drainer = b
        .ctl
        .control
        .on(b.node(0))
        .with_timeout(Duration::from_secs(180));
    let request = drainer.drain(roots.clone());
    tokio::pin!(request);
    let t = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut disposed_at: Option<Duration> = None;
    let outcome = loop {
        tokio::select! {
            r = &mut request => break Some(r),
            _ = tick.tick() => {
                if let Some(at) = disposed_at {
                    if t.elapsed() > at + Duration::from_secs(5) {
                        break None;
                    }
                    continue;
                }
                let mut all = true;
                for root in &roots {
                    let state = b
                        .registry
                        .session(root.clone(), Consistency::Linearizable)
                        .await
                        .ok()
                        .flatten()
                        .map(|r| r.state);
                    if state != Some(SessionState::Disposed) {
                        all = false;
                        break;
                    }
                }
                if all {
                    disposed_at = Some(t.elapsed());
                }
            }
        }
    };
    let reply_wall = t.elapsed();
    let (wall, note) = match (outcome, disposed_at) {
        (Some(Ok(report)), _) => {
            let disposed = report.disposed();
            let warnings = if report.warnings.is_empty() {
                String::new()
            } else {
                format!("; warnings: {}", report.warnings.join("; "))
            };
            (
                reply_wall,
                format!(
                    "{disposed} disposed in {} waves (report: {} listed{}){warnings}",
                    report.summary.len(),
                    report.listed(),
                    if report.truncated { ", truncated" } else { "" }
                ),
            )
        }
        (Some(Err(e)), Some(at)) => (
            at,
            format!("the reply was lost ({e}); timed to the last root disposed in the registry"),
        ),
        (None, Some(at)) => (
            at,
            "no reply within 5 s after every root was disposed (a report for this many sessions is larger than the server's max_payload); timed to the last root disposed in the registry".to_owned(),
        ),
        (Some(Err(e)), None) => {
            println!("{name}: FAILED after {reply_wall:.1?}: {e}");
            return Err(ControlError::new(e.code, format!("{name}: {}", e.message)));
        }
        (None, None) => return Err(internal(format!("{name}: no reply"))),
    };
    b.report(
        name,
        &Samples {
            latencies: vec![wall],
            wall,
        },
    );
    println!(
        "  {note}; {:.0} sessions/s",
        size as f64 / wall.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// Registers `trees` trees of `each` sessions (depth 4 when large enough), level by level
/// across all trees; returns the roots and the depth reached.
async fn build_forest(
    b: &Bench,
    trees: usize,
    each: usize,
) -> Result<(Vec<SessionId>, usize), ControlError> {
    let new_id =
        || SessionId::parse(&uuid::Uuid::now_v7().to_string()).map_err(|e| internal(e.to_string()));
    let fanout = ((each as f64).powf(0.25).ceil() as usize).max(2);
    let descriptor = serde_json::to_value(SubagentDescriptor {
        provider: "script".to_owned(),
        label: None,
        mode: SubagentShape::Continuable,
        tool_filter: None,
        persona: None,
    })
    .map_err(|e| internal(e.to_string()))?;
    // levels[tree][depth]: the headers of one tree's level.
    let mut levels: Vec<Vec<Vec<SessionHeader>>> = Vec::with_capacity(trees);
    let mut roots = Vec::with_capacity(trees);
    for _ in 0..trees {
        let root = SessionHeader::top_level(new_id()?, None, None);
        roots.push(root.id().clone());
        levels.push(vec![vec![root]]);
    }
    register_level(b, levels.iter().map(|t| t[0][0].clone()).collect(), None, 0).await?;
    let mut made = 1;
    let mut depth = 0;
    while made < each {
        depth += 1;
        let want = if depth < 4 {
            (levels[0][depth - 1].len() * fanout).min(each - made)
        } else {
            each - made
        };
        let mut batch = Vec::with_capacity(want * trees);
        for tree in &mut levels {
            let prev = &tree[depth - 1];
            let mut level = Vec::with_capacity(want);
            for i in 0..want {
                let parent = &prev[i % prev.len()];
                level.push(
                    child_session_meta(parent, new_id()?, depth as u64, 0, None)
                        .map_err(|e| internal(e.to_string()))?,
                );
            }
            batch.extend(level.iter().cloned());
            tree.push(level);
        }
        register_level(b, batch, Some(descriptor.clone()), made).await?;
        made += want;
    }
    Ok((roots, depth))
}

/// Registers one level (64 writers); placement round-robin over the nodes from `offset`.
async fn register_level(
    b: &Bench,
    level: Vec<SessionHeader>,
    descriptor: Option<serde_json::Value>,
    offset: usize,
) -> Result<(), ControlError> {
    let level = Arc::new(level);
    let nodes = Arc::new(b.nodes.clone());
    let registry = b.registry.clone();
    concurrent(level.len(), 64, move |i| {
        let header = level[i].clone();
        let node = nodes[(offset + i) % nodes.len()].clone();
        let registry = registry.clone();
        let descriptor = descriptor.clone();
        async move {
            let request = RequestId::parse(&uuid::Uuid::now_v7().to_string())
                .map_err(|e| internal(e.to_string()))?;
            registry
                .register_session(
                    request,
                    crate::cmd::now_ms(),
                    header,
                    NewSession {
                        descriptor,
                        node: Some(node.clone()),
                        // Registered as its node would (running, no live agent): it takes
                        // children and the birth sweeper leaves it alone.
                        hosted: true,
                        ..NewSession::default()
                    },
                )
                .await
                .map(|_| ())
                .map_err(|e| unavailable("register a drain-tree session", e))
        }
    })
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_sender_reads_the_dedup_id_of_a_settled_notice() {
        let event = serde_json::json!({
            "seq": 4, "kind": "inbox/accepted", "at_ms": 1,
            "data": {"message": {"kind": "subagent-settled", "sender_session_id": "x", "summary": "s"},
                     "wake": true, "dedup_id": "01936c1e-7a3b-7cde-8f00-000000000001-1"}
        });
        assert_eq!(
            accepted_sender(event.to_string().as_bytes()).as_deref(),
            Some("01936c1e-7a3b-7cde-8f00-000000000001")
        );
        let other = serde_json::json!({"seq": 5, "kind": "turn/start", "at_ms": 1, "data": {}});
        assert_eq!(accepted_sender(other.to_string().as_bytes()), None);
    }

    #[test]
    fn replies_script_has_one_turn_of_n_replies() {
        let s = replies(3);
        assert_eq!(s.turns.len(), 1);
        assert_eq!(s.turns[0].len(), 3);
    }
}
