//! End to end, drain (X1, H2, X2): a live tree of depth 4 and fan-out 3 (1 + 3 + 9 + 27 + 81 =
//! 121 sessions) spread over three nodes is drained; every session is disposed, children
//! before parents, as the registry records it.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use lineage_core::drain::verify_child_first;
use lineage_core::ids::SessionId;
use serde_json::{json, Value};

const DEPTH: u32 = 4;
const FAN_OUT: u32 = 3;

/// The script of a session at `depth`: spawn `FAN_OUT` continuable children, round-robin over
/// the nodes, each running the next level; leaves stay in a long turn (live until drained).
fn level(depth: u32) -> Value {
    if depth == DEPTH {
        return json!({"turns": [[{"do": "sleep", "ms": 300000}]]});
    }
    let steps: Vec<Value> = (0..FAN_OUT)
        .map(|i| {
            let node = format!("node-{}", (i + depth) % 3 + 1);
            spawn_step("continuable", &node, "work", level(depth + 1))
        })
        .collect();
    json!({"turns": [steps]})
}

fn sid(v: &Value) -> SessionId {
    SessionId::parse(v.as_str().expect("id")).expect("session id")
}

#[test]
fn x1_h2_drain_depth4_fanout3_tree_child_first() {
    let c = Cluster::start(3);
    let total: usize = (0..=DEPTH).map(|d| FAN_OUT.pow(d) as usize).sum();
    assert_eq!(total, 121);
    let started = Instant::now();
    let root = c.spawn_root("node-1", &level(0));
    // The whole tree is live: leaves in their turn, inner sessions waiting on their children.
    let tree = eventually(Duration::from_secs(60), "121 live sessions", || {
        let tree = c.tree(&root);
        let live = tree
            .iter()
            .filter(|r| r["live"] == true && r["state"] != "settled" && r["state"] != "disposed")
            .count();
        (tree.len() == total && live == total).then_some(tree)
    });
    let built = started.elapsed();
    let mut per_depth = BTreeMap::new();
    let mut per_node = BTreeMap::new();
    for r in &tree {
        *per_depth.entry(r["depth"].as_u64().unwrap()).or_insert(0) += 1;
        *per_node
            .entry(r["node"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    assert_eq!(
        per_depth,
        BTreeMap::from([(0, 1), (1, 3), (2, 9), (3, 27), (4, 81)])
    );
    assert_eq!(per_node.len(), 3, "spread over three nodes: {per_node:?}");
    assert!(per_node.values().all(|n| *n >= 30), "{per_node:?}");

    // Drain the root.
    let t0 = Instant::now();
    let report = c.cli_json(&["drain", &root]);
    let took = t0.elapsed();
    assert_eq!(
        report["closed"].as_array().map(Vec::len),
        Some(total),
        "{report}"
    );
    let order: Vec<SessionId> = report["waves"]
        .as_array()
        .expect("waves")
        .iter()
        .flat_map(|w| {
            w.as_array()
                .expect("wave")
                .iter()
                .map(|d| sid(&d["session"]))
        })
        .collect();
    assert_eq!(order.len(), total, "{report}");
    assert_eq!(
        report["waves"].as_array().unwrap().len(),
        DEPTH as usize + 1,
        "{report}"
    );
    assert!(
        report["warnings"].as_array().unwrap().is_empty(),
        "{report}"
    );
    // Under the report's cap: every disposal listed; the counts agree.
    assert_eq!(report["truncated"], false, "{report}");
    assert_eq!(report["closed_count"], total, "{report}");
    assert_eq!(report["totals"]["released"], total, "{report}");
    assert_eq!(
        report["summary"].as_array().map(Vec::len),
        Some(DEPTH as usize + 1),
        "{report}"
    );
    let released = report["waves"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w.as_array().unwrap())
        .filter(|d| d["kind"] == "released")
        .count();
    assert_eq!(
        released, total,
        "every live session is released on its node: {report}"
    );

    // The registry: all disposed, none live, each child disposed no later than its parent.
    let after = c.tree(&root);
    assert_eq!(after.len(), total);
    for r in &after {
        assert_eq!(r["state"], "disposed", "{r}");
        assert_eq!(r["admission"], "closed", "{r}");
        assert_eq!(r["live"], false, "{r}");
    }
    let parents: BTreeMap<SessionId, SessionId> = after
        .iter()
        .filter(|r| !r["parent"].is_null())
        .map(|r| (sid(&r["session"]), sid(&r["parent"])))
        .collect();
    verify_child_first(&order, &parents).expect("the drain report disposes children first");
    let at: BTreeMap<SessionId, u64> = after
        .iter()
        .map(|r| {
            (
                sid(&r["session"]),
                r["updated_at_ms"].as_u64().expect("updated_at_ms"),
            )
        })
        .collect();
    for (child, parent) in &parents {
        assert!(
            at[child] <= at[parent],
            "{child} disposed at {} after its parent {parent} at {}",
            at[child],
            at[parent]
        );
    }
    // The registry's own disposal times, ordered (ties broken deepest first), pass the same check.
    let depth: BTreeMap<SessionId, u64> = after
        .iter()
        .map(|r| (sid(&r["session"]), r["depth"].as_u64().unwrap()))
        .collect();
    let mut by_time: Vec<SessionId> = at.keys().cloned().collect();
    by_time.sort_by_key(|s| (at[s], std::cmp::Reverse(depth[s])));
    verify_child_first(&by_time, &parents).expect("registry disposal times are child-first");

    // No node hosts anything any more; a leaf's turn was cancelled and it settled `disposed`.
    let status = c.cli_json(&["status"]);
    for n in status["nodes"].as_array().unwrap() {
        assert_eq!(n["live_agents"], 0, "{status}");
    }
    let leaf = after.iter().find(|r| r["depth"] == DEPTH).unwrap();
    let log = c.log(leaf["session"].as_str().unwrap());
    let ends = of_kind(&log, "turn/end");
    assert_eq!(ends.len(), 1, "{}", render_log(&log));
    assert_ne!(
        ends[0].data["stop_reason"],
        "completed",
        "{}",
        render_log(&log)
    );
    let settled = of_kind(&log, "outbox/settled");
    assert_eq!(settled.len(), 1, "{}", render_log(&log));
    assert_eq!(
        settled[0].data["stop_reason"],
        "disposed",
        "{}",
        render_log(&log)
    );
    eprintln!("built {total} sessions in {built:?}, drained in {took:?}");
    assert!(took < Duration::from_secs(60), "drain took {took:?}");
}
