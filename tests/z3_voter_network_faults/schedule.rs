//! The fault schedule both voter network fault tests run (see the test file's docs): a worker
//! node-4 hosting a root, one-shot children spawned through the CLI with request ids while one
//! voter at a time has its links slowed, blackholed, reset or cut; then the checks once healed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lineage_testkit::prelude::*;
use lineage_testkit::toxiproxy::{both_ways, Toxiproxy};
use serde_json::{json, Value};

/// Spawns per fault, one after the other.
const PER_FAULT: usize = 3;

/// The registry leader's node index (0-based), once there is one.
pub fn leader_index(c: &Cluster) -> usize {
    let id = wait_for(Duration::from_secs(30), "a registry leader", || {
        c.cli_json(&["status"])["registry"]["leader"].as_u64()
    });
    (id as usize).saturating_sub(1)
}

/// Waits until every node's lease is live again (each heartbeats through the registry), so a
/// fault's figures are its own and not the last one's.
fn settled(c: &Cluster) {
    wait_for(
        Duration::from_secs(60),
        "every node's lease live again",
        || {
            let status = c.cli_json(&["status"]);
            let nodes = status["nodes"].as_array().cloned().unwrap_or_default();
            (nodes.len() == 4 && nodes.iter().all(|n| n["lease_live"] == true)).then_some(())
        },
    );
}

/// What a spawn came to: acknowledged (the child it named); refused on a retry because its
/// first birth never started (disposed unstarted: issue 10, a retry completes or refuses), or
/// because that birth ran and is disposed already (a one-shot that finished while the caller
/// had given up); or not answered.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Spawned(String),
    NeverStarted(String),
    RanBefore(String),
    Failed(i32),
}

/// One fault of the schedule: what it does, on whom, and its toxics (none: the proxy is
/// disabled, connections cut and refused).
struct Fault {
    what: &'static str,
    on_leader: bool,
    toxics: Vec<Value>,
}

/// Runs the schedule on `c`, whose voters' links go through `proxy`: `links(i)` names the
/// proxies that carry voter `i`'s (0-based) links, all faulted together. `what` names the
/// links in the printed report.
pub fn run_schedule(
    c: &mut Cluster,
    proxy: &Toxiproxy,
    links: &dyn Fn(usize) -> Vec<String>,
    what: &str,
) {
    c.add_client_node("node-4", &[]);
    c.wait_ready(Duration::from_secs(60));
    let root = c.spawn_root(
        "node-4",
        &json!({"turns": [[{"do": "reply", "content": "ready"}]], "after": {"do": "echo"}}),
    );
    let child = json!({"turns": [[{"do": "reply", "content": "done"}]]}).to_string();
    let spawn = |request: &str| -> (Outcome, Duration) {
        let began = Instant::now();
        let (code, out, err) = c.cli(&[
            "--timeout-ms",
            "15000",
            "--json",
            "spawn",
            "--parent",
            &root,
            "--shape",
            "one-shot",
            "--node",
            "node-4",
            "--prompt",
            "work",
            "--script",
            &child,
            "--request-id",
            request,
        ]);
        let took = began.elapsed();
        let session = serde_json::from_str::<Value>(&out)
            .ok()
            .and_then(|reply| reply["session"].as_str().map(str::to_owned));
        let first = err
            .split_once("whose session ")
            .and_then(|(_, rest)| rest.split_once(' '))
            .map(|(id, rest)| (id.to_owned(), rest.starts_with("never started")));
        let outcome = match (code, session, first) {
            (0, Some(session), _) => Outcome::Spawned(session),
            (2, _, Some((session, true))) => Outcome::NeverStarted(session),
            (2, _, Some((session, false))) => Outcome::RanBefore(session),
            (code, ..) => Outcome::Failed(code),
        };
        if code != 0 {
            println!(
                "spawn {request}: exit {code} after {took:?}: {}",
                err.trim()
            );
        }
        (outcome, took)
    };

    let schedule = [
        Fault {
            what: "latency 300 ms",
            on_leader: true,
            toxics: both_ways("slow", "latency", json!({"latency": 300, "jitter": 100})),
        },
        Fault {
            what: "partition (blackhole)",
            on_leader: false,
            toxics: both_ways("hole", "timeout", json!({"timeout": 0})),
        },
        Fault {
            what: "partition (blackhole)",
            on_leader: true,
            toxics: both_ways("hole", "timeout", json!({"timeout": 0})),
        },
        Fault {
            what: "connections reset",
            on_leader: true,
            toxics: both_ways("reset", "reset_peer", json!({"timeout": 0})),
        },
        Fault {
            what: "link cut",
            on_leader: false,
            toxics: vec![],
        },
    ];
    // request id -> what its spawn came to
    let mut sent: BTreeMap<String, Outcome> = BTreeMap::new();
    let mut report = Vec::new();
    let mut n = 0;
    for fault in &schedule {
        settled(c);
        let leader = leader_index(c);
        let target = if fault.on_leader {
            leader
        } else {
            (leader + 1) % 3
        };
        let names = links(target);
        let began = Instant::now();
        for name in &names {
            if fault.toxics.is_empty() {
                proxy.set_enabled(name, false);
            }
            proxy.add_toxics(name, &fault.toxics);
        }
        let mut slowest = Duration::ZERO;
        let mut gave_up = 0;
        for _ in 0..PER_FAULT {
            n += 1;
            let request = format!("voter-fault-{n}");
            let (outcome, took) = spawn(&request);
            slowest = slowest.max(took);
            gave_up += usize::from(!matches!(outcome, Outcome::Spawned(_)));
            sent.insert(request, outcome);
        }
        if let Some(rest) = Duration::from_secs(3).checked_sub(began.elapsed()) {
            std::thread::sleep(rest);
        }
        for name in &names {
            if fault.toxics.is_empty() {
                proxy.set_enabled(name, true);
            }
            proxy.remove_toxics(name, &fault.toxics);
        }
        let role = if fault.on_leader {
            "leader"
        } else {
            "follower"
        };
        report.push(format!(
            "{} on the {role} (node-{}): {PER_FAULT} spawns, {gave_up} given up, slowest {slowest:?}, healed after {:?}",
            fault.what,
            target + 1,
            began.elapsed()
        ));
    }

    // Healed: every node ready again within a bound.
    let healed = Instant::now();
    c.wait_ready(Duration::from_secs(60));
    settled(c);
    let back = healed.elapsed();
    // A spawn the CLI gave up on may or may not have happened: sent again under its id, it
    // completes (or names the child it already is), never a second child.
    let retried = sent
        .values()
        .filter(|o| matches!(o, Outcome::Failed(_)))
        .count();
    for (request, outcome) in sent.iter_mut() {
        if matches!(outcome, Outcome::Failed(_)) {
            *outcome = spawn(request).0;
        }
    }
    let mut broken: Vec<String> = sent
        .iter()
        .filter_map(|(request, outcome)| match outcome {
            Outcome::Failed(code) => Some(format!(
                "spawn {request} still fails after the heal (exit {code})"
            )),
            _ => None,
        })
        .collect();

    // Every child ran and was disposed, or never started and was disposed; one child per
    // request id, the one its answer named.
    let tree = wait_for(Duration::from_secs(60), "every child disposed", || {
        let tree = c.tree(&root);
        let kids: Vec<&Value> = tree
            .iter()
            .filter(|r| r["parent"] == root.as_str())
            .collect();
        if kids.len() >= sent.len() && kids.iter().all(|r| r["state"] == "disposed") {
            Ok(tree)
        } else {
            Err(kids
                .iter()
                .map(|r| format!("{} {} on {}", r["session"], r["state"], r["node"]))
                .collect::<Vec<_>>()
                .join("; "))
        }
    });
    let kids = Cluster::children(&tree, &root);
    if kids.len() != sent.len() {
        broken.push(format!(
            "{} children for {} spawn request ids",
            kids.len(),
            sent.len()
        ));
    }
    let mut named = std::collections::BTreeSet::new();
    let mut never_started = 0;
    for (request, outcome) in &sent {
        let (session, ran) = match outcome {
            Outcome::Spawned(session) | Outcome::RanBefore(session) => (session, true),
            Outcome::NeverStarted(session) => {
                never_started += 1;
                (session, false)
            }
            Outcome::Failed(_) => continue,
        };
        if !named.insert(session.clone()) {
            broken.push(format!(
                "spawn {request} named {session}, as another id did"
            ));
        }
        if !kids.contains(session) {
            broken.push(format!(
                "spawn {request} named {session}, which the tree does not hold"
            ));
            continue;
        }
        let log = c.log(session);
        if log.iter().any(|e| e.kind == "turn/end") != ran {
            broken.push(format!(
                "child {session} of spawn {request}: acknowledged {ran}, but its log {}",
                if ran { "holds no turn" } else { "holds a turn" }
            ));
        }
    }
    println!(
        "voter network faults ({what}): {} spawns ({retried} sent again after the heal, {never_started} of those refused: their first birth never started), every node ready and its lease live {back:?} after the last heal\n  {}",
        sent.len(),
        report.join("\n  ")
    );
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
