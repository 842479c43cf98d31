//! Issue 12 (G1, G3, X1): the registry is linearizable under faults, checked by a checker this
//! project did not write. A real 3-voter cluster (nats-server + three `lineage` node processes,
//! openraft on disk with fsync) takes a seeded, bounded mixed workload from several concurrent
//! clients (register roots and children, dispose, close admission on subtrees, linearizable
//! reads, all on shared trees) while a seeded schedule SIGKILLs (and restarts) and
//! SIGSTOPs/SIGCONTs the registry leader and followers. Every client operation is recorded
//! (call, return or unknown, output) and the history goes to Porcupine
//! (`tools/porcupine`, `github.com/anishathalye/porcupine`) with a model of the registry's
//! rules (its own tests run first: it must refuse a stale read and a lost write). After the
//! faults heal every node must serve again within 30 s.
//!
//! `LINEAGE_CHAOS_SEED` (default 12) and `LINEAGE_CHAOS_OPS` (per client, default 150) set the
//! run; the history is kept in the system temp dir (`lineage-chaos-<seed>-history.json`) for
//! `go run ./tools/porcupine <file>` (`PORCUPINE_VISUALIZE=out.html` draws it).

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_registry::{Admission, Command as RegistryCommand, CommandResponse, Consistency};
use lineage_registry::{RegistryClient, SessionState};
use lineage_testkit::prelude::*;
use lineage_testkit::seeded::{from_env, Rng};
use serde_json::{json, Value};

/// Concurrent clients.
const CLIENTS: usize = 4;
/// A node no process runs: sessions registered as hosted there are left alone by every
/// sweep (no lease, no takeover), so only the workload changes them.
const NOWHERE: &str = "chaos-nowhere";

/// A session some client tried to register (its outcome may be unknown).
#[derive(Clone)]
struct Known {
    header: SessionHeader,
    root: SessionId,
}

/// One recorded operation, in Porcupine's terms.
struct Recorded {
    client: usize,
    call: i64,
    ret: i64,
    input: Value,
    output: Value,
}

fn refusal_name(response: &CommandResponse) -> Option<String> {
    match response {
        CommandResponse::Refused(r) => Some(
            serde_json::to_value(r).expect("refusal JSON")["refusal"]
                .as_str()
                .unwrap_or("?")
                .to_owned(),
        ),
        _ => None,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs one client's operations, recording each.
async fn client(
    id: usize,
    seed: u64,
    ops: usize,
    registry: RegistryClient,
    pool: Arc<Mutex<Vec<Known>>>,
    start: Instant,
) -> Vec<Recorded> {
    let mut rng = Rng::new(seed ^ ((id as u64 + 1) * 7919));
    let mut out = Vec::with_capacity(ops);
    for n in 0..ops {
        // Paced, so the workload spans the fault schedule.
        tokio::time::sleep(Duration::from_millis(20 + rng.below(40) as u64)).await;
        let picked = {
            let pool = pool.lock().unwrap();
            (!pool.is_empty()).then(|| pool[rng.below(pool.len())].clone())
        };
        let kind = match (rng.below(100), &picked) {
            (_, None) | (0..=14, _) => "root",
            (15..=49, _) => "register",
            (50..=69, _) => "dispose",
            (70..=79, _) => "close",
            _ => "read",
        };
        let request_id = RequestId::parse(&format!("chaos-{seed}-{id}-{n}")).unwrap();
        let (input, command) = match (kind, &picked) {
            ("root", _) | (_, None) => {
                let session = SessionId::parse(&uuid::Uuid::now_v7().to_string()).unwrap();
                let header = SessionHeader::top_level(session.clone(), None, None);
                pool.lock().unwrap().push(Known {
                    header: header.clone(),
                    root: session.clone(),
                });
                (
                    json!({"op": "register", "tree": session, "session": session}),
                    Some(register(request_id, header)),
                )
            }
            ("register", Some(parent)) => {
                let session = SessionId::parse(&uuid::Uuid::now_v7().to_string()).unwrap();
                let depth = parent.header.delegation_depth().unwrap_or(0) + 1;
                let header = child_session_meta(&parent.header, session.clone(), depth, 0, None)
                    .expect("child header");
                pool.lock().unwrap().push(Known {
                    header: header.clone(),
                    root: parent.root.clone(),
                });
                (
                    json!({"op": "register", "tree": parent.root, "session": session,
                           "parent": parent.header.id()}),
                    Some(register(request_id, header)),
                )
            }
            (op, Some(target)) => {
                let session = target.header.id().clone();
                let input = json!({"op": op, "tree": target.root, "session": session});
                let command = match op {
                    "dispose" => Some(RegistryCommand::Dispose {
                        request_id,
                        at_ms: now_ms(),
                        session,
                    }),
                    "close" => Some(RegistryCommand::CloseAdmission {
                        request_id,
                        at_ms: now_ms(),
                        roots: vec![session],
                    }),
                    _ => None,
                };
                (input, command)
            }
        };
        let call = start.elapsed().as_nanos() as i64;
        let output = match command {
            Some(cmd) => match registry.write(&cmd).await {
                Ok(response) => Some(match (&response, refusal_name(&response)) {
                    (_, Some(reason)) => json!({"ok": false, "reason": reason}),
                    (CommandResponse::Registered { .. }, None) => json!({"ok": true}),
                    (CommandResponse::Disposed { already, .. }, None) => {
                        json!({"ok": true, "already": already})
                    }
                    (CommandResponse::AdmissionClosed { sessions }, None) => {
                        json!({"ok": true, "count": sessions.len()})
                    }
                    (other, None) => panic!("unexpected registry response {other:?}"),
                }),
                Err(_) => None,
            },
            None => {
                let session = SessionId::parse(input["session"].as_str().unwrap()).unwrap();
                match registry.session(session, Consistency::Linearizable).await {
                    Ok(None) => Some(json!({"ok": true})),
                    Ok(Some(r)) => Some(json!({"ok": true, "found": true,
                        "disposed": r.state == SessionState::Disposed,
                        "closed": r.admission == Admission::Closed})),
                    Err(_) => None,
                }
            }
        };
        let ret = start.elapsed().as_nanos() as i64;
        out.push(Recorded {
            client: id,
            call,
            ret: if output.is_some() { ret } else { -1 },
            input,
            output: output.unwrap_or(Value::Null),
        });
    }
    out
}

fn register(request_id: RequestId, header: SessionHeader) -> RegistryCommand {
    RegistryCommand::RegisterSession {
        request_id,
        at_ms: now_ms(),
        header,
        descriptor: None,
        max_depth: None,
        fan_out: Default::default(),
        budget: None,
        node: Some(NodeId::parse(NOWHERE).unwrap()),
        run: None,
        start_within_ms: None,
        hosted: true,
    }
}

/// The registry leader's node index, once there is one.
fn leader_index(c: &Cluster) -> usize {
    let id = wait_for(Duration::from_secs(30), "a registry leader", || {
        c.cli_json(&["status"])["registry"]["leader"].as_u64()
    });
    (id as usize).saturating_sub(1)
}

#[test]
fn g1_g3_the_registry_stays_linearizable_under_kills_and_stops_checked_by_porcupine() {
    let seed: u64 = from_env("LINEAGE_CHAOS_SEED", 12);
    let ops: usize = from_env("LINEAGE_CHAOS_OPS", 150);
    let mut c = Cluster::start(3);
    let url = c.nats.url();
    let cluster = c.cluster.clone();
    let done = Arc::new(AtomicBool::new(false));
    let finished = done.clone();
    let start = Instant::now();
    let workload = std::thread::spawn(move || {
        let bus = Bus::connect(&[url]);
        let pool = Arc::new(Mutex::new(Vec::new()));
        let history = bus.rt.block_on(async {
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|id| {
                    let registry = RegistryClient::new(bus.client.clone(), cluster.clone());
                    tokio::spawn(client(id, seed, ops, registry, pool.clone(), start))
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.expect("client task"));
            }
            all
        });
        finished.store(true, Ordering::SeqCst);
        history
    });

    // The faults: one every ~1.5 s while the workload runs, bounded, each healed before the next.
    let mut rng = Rng::new(seed);
    let mut injected = Vec::new();
    let mut windows: Vec<(&str, i64, i64)> = Vec::new();
    for round in 0..12 {
        if done.load(Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_millis(800 + rng.below(1400) as u64));
        let leader = leader_index(&c);
        let follower = (leader + 1 + rng.below(2)) % 3;
        let kind = round % 4;
        let (name, victim) = match kind {
            0 => ("SIGKILL leader", leader),
            1 => ("SIGSTOP follower", follower),
            2 => ("SIGSTOP leader", leader),
            _ => ("SIGKILL follower", follower),
        };
        let began = Instant::now();
        let from = start.elapsed().as_nanos() as i64;
        match kind {
            0 | 3 => {
                c.nodes[victim].kill();
                std::thread::sleep(Duration::from_millis(500 + rng.below(1000) as u64));
                c.restart(victim);
            }
            _ => {
                c.nodes[victim].stop();
                std::thread::sleep(Duration::from_millis(1000 + rng.below(2000) as u64));
                c.nodes[victim].cont();
            }
        }
        injected.push(format!(
            "{name} (node-{}, {:?})",
            victim + 1,
            began.elapsed()
        ));
        windows.push((name, from, start.elapsed().as_nanos() as i64));
    }
    let history = workload.join().expect("the workload");
    // Healed: every node serves again within a bound.
    let healed = Instant::now();
    c.wait_ready(Duration::from_secs(30));
    for node in ["node-1", "node-2", "node-3"] {
        let status = c.node_ctl(node, "status", b"{}");
        assert_eq!(status["result"]["node"], node, "{status}");
    }
    let heal = healed.elapsed();

    let unknown = history.iter().filter(|o| o.ret < 0).count();
    let refused = history.iter().filter(|o| o.output["ok"] == false).count();
    let mut latencies: Vec<i64> = history
        .iter()
        .filter(|o| o.ret >= 0)
        .map(|o| o.ret - o.call)
        .collect();
    latencies.sort_unstable();
    let pct = |p: usize| {
        latencies
            .get(latencies.len() * p / 100)
            .copied()
            .unwrap_or(0)
            / 1_000_000
    };
    let body = json!({"operations": history.iter().map(|o| json!({
        "client": o.client, "call": o.call, "return": o.ret, "input": o.input, "output": o.output,
    })).collect::<Vec<_>>()});
    let file = std::env::temp_dir().join(format!("lineage-chaos-{seed}-history.json"));
    std::fs::write(&file, body.to_string()).expect("write the history");
    println!(
        "chaos seed {seed}: {} operations ({refused} refused, {unknown} unknown), faults: {}; latency p50 {} ms, p99 {} ms, max {} ms; all nodes serving {:?} after the workload",
        history.len(),
        injected.join(", "),
        pct(50),
        pct(99),
        latencies.last().copied().unwrap_or(0) / 1_000_000,
        heal
    );
    // Per fault kind, how long the clients waited: the longest operation that overlapped each
    // fault (from its injection to its healing), then p50 and max over the faults of the kind.
    for kind in [
        "SIGKILL leader",
        "SIGSTOP leader",
        "SIGKILL follower",
        "SIGSTOP follower",
    ] {
        let mut waits: Vec<i64> = windows
            .iter()
            .filter(|(name, ..)| *name == kind)
            .map(|(_, from, to)| {
                history
                    .iter()
                    .filter(|o| o.ret >= 0 && o.call <= *to && o.ret >= *from)
                    .map(|o| o.ret - o.call)
                    .max()
                    .unwrap_or(0)
                    / 1_000_000
            })
            .collect();
        waits.sort_unstable();
        if let (Some(p50), Some(max)) = (waits.get(waits.len() / 2), waits.last()) {
            println!(
                "chaos seed {seed}: {kind}: {} injected, longest wait per fault p50 {p50} ms, max {max} ms",
                waits.len()
            );
        }
    }
    assert!(!injected.is_empty(), "no fault was injected");
    assert!(
        unknown * 4 < history.len(),
        "over a quarter of the operations have no outcome (seed {seed})"
    );

    let checker = lineage_testkit::workspace_root().join("tools/porcupine");
    // The checker's own tests first: it refuses a stale read, a lost acknowledged write and a
    // duplicate registration, and takes an unknown outcome as either (tools/porcupine/main_test.go).
    let selftest = Command::new("go")
        .args(["test", "./..."])
        .current_dir(&checker)
        .output()
        .expect("go (the Porcupine checker is a Go program: tools/porcupine)");
    assert!(
        selftest.status.success(),
        "the checker's own tests failed: {}{}",
        String::from_utf8_lossy(&selftest.stdout),
        String::from_utf8_lossy(&selftest.stderr)
    );
    let out = Command::new("go")
        .args(["run", ".", file.to_str().unwrap()])
        .current_dir(&checker)
        .output()
        .expect("go (the Porcupine checker is a Go program: tools/porcupine)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{said}");
    assert!(
        out.status.success() && said.starts_with("linearizable:"),
        "seed {seed} (LINEAGE_CHAOS_SEED={seed} to repeat; history kept in {}):\n{said}",
        file.display()
    );
}
