//! The promises, checked from the final state and the streams once the faults stop:
//! - every node answers again and no child is left running (bounded waits);
//! - every acknowledged spawn exists, with one session per spawn request;
//! - every parent accepted each of its children's reports and settlement notices at most once,
//!   and exactly once when it is live to read them (a running or waiting parent);
//! - every session of an acknowledged drain is disposed, and none was registered after the drain
//!   was acknowledged (admission closed);
//! - no session is deeper than the cluster's max depth (the deepest one-shots try to spawn past
//!   it);
//! - a budgeted tree whose children spent more than its budget is drained, all of it, and the
//!   registry counts what they spent;
//! - no node hosts a live agent for a disposed session.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use lineage_testkit::bus::{accepted, of_kind, render_log};
use lineage_testkit::Cluster;
use serde_json::Value;

use super::faults::{Fault, Injected};
use super::registry::NOWHERE;
use super::rig::NODES;
use super::trees::{Seen, BUDGET_TOKENS, CHILD_TOKENS, MAX_DEPTH};

/// The tree workload's session records (`lineage ls`), by id: not the registry workload's,
/// hosted on [`NOWHERE`].
fn records(c: &Cluster, args: &[&str]) -> BTreeMap<String, Value> {
    c.cli_json(args)["sessions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r["node"] != NOWHERE)
        .filter_map(|r| Some((r["session"].as_str()?.to_owned(), r)))
        .collect()
}

/// Runs every check; the violations found, one line each (empty: none).
pub fn check(c: &Cluster, seen: &Seen) -> Vec<String> {
    let mut broken = Vec::new();
    for node in NODES {
        let status = c.node_ctl(node, "status", b"{}");
        if status["result"]["node"] != node {
            broken.push(format!(
                "{node} does not answer status after the faults: {status}"
            ));
        }
    }
    // A top-level session never settles (an idle root stays `running`): children must.
    let mut still_running = Vec::new();
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(90) {
        still_running = records(c, &["ls", "--state", "running", "--all"])
            .into_values()
            .collect();
        still_running.retain(|r| !r["parent"].is_null());
        if still_running.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    for r in &still_running {
        let log = c.log(r["session"].as_str().unwrap_or(""));
        let tail = render_log(&log[log.len().saturating_sub(6)..]);
        broken.push(format!(
            "{} ({} at depth {} on {}) still running 90 s after the faults; its log ends: {}",
            r["session"],
            r["shape"],
            r["depth"],
            r["node"],
            tail.replace('\n', " | ")
        ));
    }
    broken.extend(budgets(c, seen));
    let records = records(c, &["ls", "--all"]);

    // Every acknowledged spawn exists; one session per spawn request.
    for (request, root) in &seen.spawned {
        if !records.contains_key(root) {
            broken.push(format!(
                "acknowledged root {root} ({request}) is not in the registry"
            ));
        }
    }
    let roots = records.values().filter(|r| r["parent"].is_null()).count();
    let attempts = seen.spawned.len() + seen.unknown_spawns.len();
    if roots < seen.spawned.len() || roots > attempts {
        broken.push(format!(
            "{roots} top-level sessions for {} acknowledged and {} unknown spawns",
            seen.spawned.len(),
            seen.unknown_spawns.len()
        ));
    }

    // Reports and settlements reach each parent at most once, exactly once when it reads
    // (given a while: a notice published as the faults ended may still be on its way).
    let mut problems = deliveries(c, &records, None);
    let settle = Instant::now();
    while !problems.is_empty() && settle.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_secs(2));
        let children: BTreeSet<String> = problems.iter().map(|(id, _)| id.clone()).collect();
        problems = deliveries(c, &records, Some(&children));
    }
    for (_, p) in problems {
        broken.push(format!(
            "{p}; {}",
            whereabouts(c, &records, p.split(' ').next().unwrap_or(""))
        ));
    }

    // Drained trees are disposed, and none of them took a session once its drain was
    // acknowledged (admission closed); no session is deeper than the cluster's max depth (the
    // deepest one-shots try to spawn past it).
    for (id, record) in &records {
        let root = record["root"].as_str().unwrap_or(id);
        if let Some(drained_at) = seen.drained.get(root) {
            if record["state"] != "disposed" {
                broken.push(format!(
                    "{id} of drained tree {root} is {}",
                    record["state"]
                ));
            }
            let born = record["created_at_ms"].as_u64().unwrap_or(0);
            if born > *drained_at {
                broken.push(format!(
                    "{id} was registered in tree {root} {} ms after its drain was acknowledged (admission closed)",
                    born - drained_at
                ));
            }
        }
        if record["depth"].as_u64().unwrap_or(0) > MAX_DEPTH as u64 {
            broken.push(format!(
                "{id} has depth {}, past the cluster's max depth {MAX_DEPTH}",
                record["depth"]
            ));
        }
    }

    // No node hosts a live agent for a disposed session (15 s to converge: an agent whose
    // session was just disposed is still tearing down for a moment).
    let mut lingering = live_but_disposed(c, &records);
    let settle = Instant::now();
    while !lingering.is_empty() && settle.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_secs(1));
        lingering = live_but_disposed(c, &records);
    }
    broken.extend(lingering);
    broken
}

/// Each live agent, on any node, of a session the registry says is disposed.
fn live_but_disposed(c: &Cluster, records: &BTreeMap<String, Value>) -> Vec<String> {
    let mut found = Vec::new();
    for node in NODES {
        let status = c.node_ctl(node, "status", b"{}");
        for live in status["result"]["live"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let session = live["session"].as_str().unwrap_or("?");
            if records
                .get(session)
                .is_some_and(|r| r["state"] == "disposed")
            {
                found.push(format!(
                    "{node} hosts a live agent of disposed session {session} (15 s after the checks began)"
                ));
            }
        }
    }
    found
}

/// Where a parent is (placed, live), and how its log ends: what a lost-notice violation needs
/// to be read.
fn whereabouts(c: &Cluster, records: &BTreeMap<String, Value>, parent: &str) -> String {
    let live: Vec<&str> = NODES
        .iter()
        .copied()
        .filter(|node| {
            c.node_ctl(node, "status", b"{}")["result"]["live"]
                .as_array()
                .is_some_and(|l| l.iter().any(|a| a["session"] == parent))
        })
        .collect();
    let log = c.log(parent);
    format!(
        "the parent is placed on {} and live on {live:?}; its log ends: {}",
        records
            .get(parent)
            .map(|r| r["node"].to_string())
            .unwrap_or_default(),
        render_log(&log[log.len().saturating_sub(5)..]).replace('\n', " | ")
    )
}

/// Budgeted trees: the usage each child that ran a turn reported is counted by the registry,
/// and a tree past its budget ends drained, every session of it disposed (60 s to converge).
fn budgets(c: &Cluster, seen: &Seen) -> Vec<String> {
    let mut broken = Vec::new();
    for root in &seen.budgeted {
        let began = Instant::now();
        let problem = loop {
            let tree = c.tree(root);
            let kids: Vec<&Value> = tree
                .iter()
                .filter(|r| r["parent"] == root.as_str())
                .collect();
            let ran = kids
                .iter()
                .filter(|k| {
                    let log = c.log(k["session"].as_str().unwrap_or(""));
                    log.iter().any(|e| e.kind == "turn/end")
                })
                .count() as u64;
            let spent = ran * CHILD_TOKENS;
            let counted = tree
                .iter()
                .find(|r| r["session"] == root.as_str())
                .and_then(|r| r["subtree_usage"]["used_tokens"].as_u64())
                .unwrap_or(0);
            let live: Vec<String> = tree
                .iter()
                .filter(|r| r["state"] != "disposed")
                .map(|r| format!("{} {}", r["session"], r["state"]))
                .collect();
            let problem = if counted < spent {
                Some(format!(
                    "budgeted tree {root}: {ran} children ran and reported {spent} tokens, the registry counts {counted}"
                ))
            } else if counted >= BUDGET_TOKENS && !live.is_empty() {
                Some(format!(
                    "budgeted tree {root} used {counted} of {BUDGET_TOKENS} tokens and is not drained: {}",
                    live.join(", ")
                ))
            } else {
                None
            };
            match problem {
                Some(p) if began.elapsed() < Duration::from_secs(60) => {
                    let _ = p;
                    std::thread::sleep(Duration::from_secs(1));
                }
                other => break other,
            }
        };
        broken.extend(problem);
    }
    broken
}

/// Each child's reports and settlement notices against what its parent accepted: at most
/// once each, and all of them when the parent reads its inbox (a running or waiting parent).
/// Only the children in `only`, when given.
fn deliveries(
    c: &Cluster,
    records: &BTreeMap<String, Value>,
    only: Option<&BTreeSet<String>>,
) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (id, record) in records {
        if only.is_some_and(|only| !only.contains(id)) {
            continue;
        }
        let Some(parent) = record["parent"].as_str() else {
            continue;
        };
        let Some(parent_record) = records.get(parent) else {
            continue;
        };
        let child_log = c.log(id);
        let parent_log = c.log(parent);
        // The parent was told of this child (`subagent/spawned`). A spawn the parent was told
        // failed (its start answered too late, say) is disposed by the parent's node (a failed
        // birth leaves no record that looks alive), even when the child did start: its agent
        // then runs until its next registry write is refused, and a settlement it writes to
        // its own log is never committed, so never notified (chaos seed 24, 2026-12-04). Such
        // a child owes its parent no notice, only never more than it sent.
        let told = of_kind(&parent_log, "subagent/spawned")
            .iter()
            .any(|e| e.data["child"] == id.as_str());
        for (kind, outbox) in [
            ("subagent-report", "outbox/report"),
            ("subagent-settled", "outbox/settled"),
        ] {
            let sent = of_kind(&child_log, outbox).len();
            let got = accepted(&parent_log, kind, Some(id));
            let ids: BTreeSet<String> =
                got.iter().map(|e| e.data["dedup_id"].to_string()).collect();
            if ids.len() != got.len() {
                problems.push((
                    id.clone(),
                    format!("{parent} accepted a {kind} of {id} twice"),
                ));
            }
            // A live parent reads its inbox (an idle root is `running`); a disposed one, a
            // drained root among them, reads no more.
            let reads = matches!(parent_record["state"].as_str(), Some("running" | "waiting"));
            if got.len() > sent || (reads && told && got.len() != sent) {
                // What the server holds for the parent, and how its log ends: a notice never
                // delivered, delivered and never acknowledged, or taken and dropped.
                let tail = render_log(&parent_log[parent_log.len().saturating_sub(4)..]);
                problems.push((
                    id.clone(),
                    format!(
                        "{parent} ({}, epoch {} on {}) accepted {} {kind} of {id}, which sent {sent}; {}; its log ends: {}",
                        parent_record["state"],
                        parent_record["epoch"],
                        parent_record["node"],
                        got.len(),
                        c.inbox_consumer_state(parent),
                        tail.replace('\n', " | ")
                    ),
                ));
            }
        }
    }
    problems
}

/// The fault kinds injected around the births of the sessions the violations name (from 10 s
/// before a birth to 2 s after it): what a smaller run (`--faults`) should try first.
pub fn faults_around(
    c: &Cluster,
    violations: &[String],
    injected: &[Injected],
    began_unix_ms: u64,
) -> Vec<Fault> {
    if violations.is_empty() {
        return Vec::new();
    }
    let records = records(c, &["ls", "--all"]);
    let mut kinds = BTreeSet::new();
    for v in violations {
        for word in v.split(|ch: char| !(ch.is_ascii_hexdigit() || ch == '-')) {
            let Some(born) = (word.len() == 36)
                .then(|| records.get(word))
                .flatten()
                .and_then(|r| r["created_at_ms"].as_u64())
            else {
                continue;
            };
            let at_ns = (born.saturating_sub(began_unix_ms) as i64) * 1_000_000;
            for f in injected {
                if f.from_ns <= at_ns + 2_000_000_000 && f.to_ns >= at_ns - 10_000_000_000 {
                    kinds.insert(f.fault);
                }
            }
        }
    }
    kinds.into_iter().collect()
}
