//! The registry workload and its check by a checker this project did not write: seeded clients
//! (direct registry clients, as the nodes are) register roots and children, dispose, close
//! admission on subtrees, claim placements by compare-and-swap on their epoch (K1's fencing)
//! and read with linearizable reads, all on shared trees, while the tree
//! workload and the faults run. Every operation is recorded (call, return or unknown, output)
//! and the history goes to Porcupine (`tools/porcupine`, `github.com/anishathalye/porcupine`)
//! with a model of the registry's rules; the checker's own tests run first.
//!
//! Sessions are registered as hosted on a node no process runs, so no sweep or takeover
//! changes them behind the workload's back.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_registry::{Admission, Command as RegistryCommand, CommandResponse, Consistency};
use lineage_registry::{RegistryClient, SessionState};
use lineage_testkit::seeded::Rng;
use serde_json::{json, Value};

use super::trees::lock;

/// A node no process runs: the registry workload's sessions are hosted there.
pub const NOWHERE: &str = "chaos-nowhere";

/// A session some client tried to register (its outcome may be unknown).
#[derive(Clone)]
struct Known {
    header: SessionHeader,
    root: SessionId,
}

/// One recorded operation, in Porcupine's terms (times in nanoseconds since the run began;
/// `ret_ns` -1: no outcome known).
pub struct Recorded {
    /// Which client.
    pub client: usize,
    /// When it was called.
    pub call_ns: i64,
    /// When it returned.
    pub ret_ns: i64,
    /// What was asked.
    pub input: Value,
    /// What was answered.
    pub output: Value,
}

fn refusal_name(response: &CommandResponse) -> Option<String> {
    match response {
        CommandResponse::Refused(r) => Some(
            serde_json::to_value(r).unwrap_or_default()["refusal"]
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

fn new_session() -> SessionId {
    SessionId::parse(&uuid::Uuid::now_v7().to_string()).expect("a v7 uuid is a session id")
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
        node: NodeId::parse(NOWHERE).ok(),
        run: None,
        start_within_ms: None,
        hosted: true,
    }
}

/// Runs one client's operations until `until` (at most `max_ops`), paced 20–60 ms.
async fn client(
    id: usize,
    seed: u64,
    max_ops: usize,
    registry: RegistryClient,
    pool: Arc<Mutex<Vec<Known>>>,
    began: Instant,
    until: Instant,
) -> Vec<Recorded> {
    let mut rng = Rng::new(seed ^ ((id as u64 + 1) * 7919));
    let mut out = Vec::new();
    // The placement epoch this client last saw of each session (a claim usually expects it;
    // sometimes a guess, so that claims also lose).
    let mut epochs: std::collections::HashMap<SessionId, u64> = Default::default();
    for n in 0..max_ops {
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20 + rng.below(40) as u64)).await;
        let picked = {
            let pool = lock(&pool);
            (!pool.is_empty()).then(|| pool[rng.below(pool.len())].clone())
        };
        let kind = match (rng.below(100), &picked) {
            (_, None) | (0..=14, _) => "root",
            (15..=44, _) => "register",
            (45..=59, _) => "dispose",
            (60..=69, _) => "close",
            (70..=79, _) => "claim",
            _ => "read",
        };
        let Ok(request_id) = RequestId::parse(&format!("chaos-reg-{seed}-{id}-{n}")) else {
            continue;
        };
        let (input, command) = match (kind, &picked) {
            ("root", _) | (_, None) => {
                let session = new_session();
                let header = SessionHeader::top_level(session.clone(), None, None);
                lock(&pool).push(Known {
                    header: header.clone(),
                    root: session.clone(),
                });
                (
                    json!({"op": "register", "tree": session, "session": session}),
                    Some(register(request_id, header)),
                )
            }
            ("register", Some(parent)) => {
                let session = new_session();
                let depth = parent.header.delegation_depth().unwrap_or(0) + 1;
                let Ok(header) =
                    child_session_meta(&parent.header, session.clone(), depth, 0, None)
                else {
                    continue;
                };
                lock(&pool).push(Known {
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
                let mut input = json!({"op": op, "tree": target.root, "session": session});
                let command = match op {
                    "claim" => {
                        let expected = match epochs.get(&session) {
                            Some(e) if rng.below(10) < 7 => *e,
                            _ => 1 + rng.below(3) as u64,
                        };
                        input["epoch"] = json!(expected);
                        NodeId::parse(NOWHERE)
                            .ok()
                            .map(|node| RegistryCommand::ClaimPlacement {
                                request_id,
                                at_ms: now_ms(),
                                session: session.clone(),
                                node,
                                expected_epoch: expected,
                                run: None,
                                activate: false,
                            })
                    }
                    "dispose" => Some(RegistryCommand::Dispose {
                        stop_reason: None,
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
        let call_ns = began.elapsed().as_nanos() as i64;
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
                    (CommandResponse::Placed { placement, .. }, None) => {
                        if let Some(s) = input["session"]
                            .as_str()
                            .and_then(|s| SessionId::parse(s).ok())
                        {
                            epochs.insert(s, placement.epoch);
                        }
                        json!({"ok": true, "epoch": placement.epoch})
                    }
                    // An answer the model does not know: recorded as such, and the checker
                    // refuses the history.
                    (other, None) => json!({"ok": true, "unexpected": format!("{other:?}")}),
                }),
                Err(_) => None,
            },
            None => {
                let Some(session) = input["session"]
                    .as_str()
                    .and_then(|s| SessionId::parse(s).ok())
                else {
                    continue;
                };
                match registry.session(session, Consistency::Linearizable).await {
                    Ok(None) => Some(json!({"ok": true})),
                    Ok(Some(r)) => {
                        let epoch = r.placement.as_ref().map_or(0, |p| p.epoch);
                        epochs.insert(r.header.id().clone(), epoch);
                        Some(json!({"ok": true, "found": true,
                            "disposed": r.state == SessionState::Disposed,
                            "closed": r.admission == Admission::Closed,
                            "epoch": epoch}))
                    }
                    Err(_) => None,
                }
            }
        };
        let ret_ns = began.elapsed().as_nanos() as i64;
        out.push(Recorded {
            client: id,
            call_ns,
            ret_ns: if output.is_some() { ret_ns } else { -1 },
            input,
            output: output.unwrap_or(Value::Null),
        });
    }
    out
}

/// Runs `clients` registry clients against `nats` until `until`, on a runtime of its own.
pub fn run(
    nats: &[String],
    cluster: &str,
    seed: u64,
    clients: usize,
    began: Instant,
    until: Instant,
) -> Result<Vec<Recorded>, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime for the registry clients: {e}"))?;
    rt.block_on(async {
        let addrs = nats
            .iter()
            .map(|u| u.parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("a NATS URL of the cluster is invalid: {e}"))?;
        let client_of_bus = async_nats::connect(addrs)
            .await
            .map_err(|e| format!("cannot connect to NATS for the registry clients: {e}"))?;
        let pool = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = (0..clients)
            .map(|id| {
                let registry = RegistryClient::new(client_of_bus.clone(), cluster.to_owned());
                tokio::spawn(client(
                    id,
                    seed,
                    100_000,
                    registry,
                    pool.clone(),
                    began,
                    until,
                ))
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(
                t.await
                    .map_err(|e| format!("a registry client failed: {e}"))?,
            );
        }
        Ok(all)
    })
}

/// Writes the history (Porcupine's input) to `dir`, runs the checker's own tests, then the
/// checker. `Ok(summary)` when linearizable; `Err(what it said)` otherwise.
pub fn check(history: &[Recorded], seed: u64, dir: &Path) -> Result<(PathBuf, String), String> {
    let body = json!({"operations": history.iter().map(|o| json!({
        "client": o.client, "call": o.call_ns, "return": o.ret_ns,
        "input": o.input, "output": o.output,
    })).collect::<Vec<_>>()});
    let file = dir.join(format!("lineage-chaos-{seed}-history.json"));
    std::fs::write(&file, body.to_string())
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let checker = lineage_testkit::workspace_root().join("tools/porcupine");
    let go = |args: &[&str]| -> Result<(bool, String), String> {
        let out = Command::new("go")
            .args(args)
            .current_dir(&checker)
            .output()
            .map_err(|e| {
                format!(
                    "cannot run go (the Porcupine checker is a Go program in tools/porcupine): {e}"
                )
            })?;
        Ok((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    };
    // It must refuse a stale read, a lost acknowledged write and a duplicate registration.
    let (ok, said) = go(&["test", "./..."])?;
    if !ok {
        return Err(format!("the checker's own tests failed: {said}"));
    }
    let (ok, said) = go(&["run", ".", &file.display().to_string()])?;
    if ok && said.starts_with("linearizable:") {
        Ok((file, said.trim().to_owned()))
    } else {
        Err(format!(
            "history {} is not linearizable:\n{said}",
            file.display()
        ))
    }
}
