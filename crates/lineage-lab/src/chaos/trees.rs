//! The tree workload: seeded clients that drive trees of scripted agents through the CLI, as an
//! operator would (a process per call: `spawn` with a request id, `tree`, `send`, `interrupt
//! --as-ancestor`, `drain`, `status`), recording every call.
//!
//! Each tree: a continuable root whose chain of continuable children goes to depth
//! [`CHAIN`] on random nodes, each level reporting with `wakeup` and spawning a one-shot child
//! (the last one, at the cluster's max depth, tries to spawn past it);
//! then followups and interrupts of random sessions of the tree, and a drain of about a third
//! of the roots. Every third tree is a budgeted one instead: a root with a budget of
//! [`BUDGET_TOKENS`] whose one-shot children report [`CHILD_TOKENS`] each, more than the budget
//! allows, so the registry must drain it.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lineage_testkit::lineage_bin;
use lineage_testkit::script::spawn_step;
use lineage_testkit::seeded::Rng;
use serde_json::{json, Value};

use super::rig::NODES;

/// How deep the continuable chain of a tree goes (the one-shots go one further).
pub const CHAIN: usize = 3;
/// The cluster's `limits.max_depth`: the chain's one-shots are at it, and try one deeper.
pub const MAX_DEPTH: usize = CHAIN + 1;
/// A budgeted tree's budget, in tokens.
pub const BUDGET_TOKENS: u64 = 250;
/// What each one-shot child of a budgeted root reports.
pub const CHILD_TOKENS: u64 = 100;
/// One-shot children of a budgeted root (their usage is twice the budget).
pub const BUDGET_CHILDREN: usize = 5;

/// One CLI call: which verb, its exit code, when it was made and when it returned
/// (nanoseconds since the run began).
#[derive(Debug, Clone)]
pub struct Call {
    /// The verb.
    pub op: &'static str,
    /// Its exit code.
    pub code: i32,
    /// When it was made.
    pub call_ns: i64,
    /// When it returned.
    pub ret_ns: i64,
    /// The first line of its stderr when it failed (empty otherwise).
    pub said: String,
}

/// What the tree clients saw.
#[derive(Default)]
pub struct Seen {
    /// Spawn request id -> the acknowledged root.
    pub spawned: BTreeMap<String, String>,
    /// Spawn request ids whose outcome is not known (the CLI failed).
    pub unknown_spawns: BTreeSet<String>,
    /// Acknowledged roots born with a budget.
    pub budgeted: BTreeSet<String>,
    /// Roots whose drain was acknowledged, and when (ms since the Unix epoch): admission to
    /// the tree was closed by then.
    pub drained: BTreeMap<String, u64>,
    /// Every call.
    pub calls: Vec<Call>,
}

/// Where the clients send their calls.
#[derive(Clone)]
pub struct Target {
    /// NATS URLs, comma-separated (the clients reach NATS directly, not through the proxies).
    pub url: String,
    /// The cluster name.
    pub cluster: String,
    /// When the run began.
    pub began: Instant,
    /// No new tree after this.
    pub until: Instant,
}

impl Target {
    /// Runs the CLI once and records the call.
    fn cli(&self, seen: &Mutex<Seen>, op: &'static str, args: &[&str]) -> (i32, String) {
        let call_ns = self.began.elapsed().as_nanos() as i64;
        let out = Command::new(lineage_bin())
            .args(["--nats", &self.url, "--cluster", &self.cluster])
            .args(["--timeout-ms", "20000"])
            .args(args)
            .output();
        let (code, stdout, said) = match out {
            Ok(out) => (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned(),
            ),
            Err(e) => (-1, String::new(), format!("cannot run lineage: {e}")),
        };
        let said = if code == 0 { String::new() } else { said };
        let ret_ns = self.began.elapsed().as_nanos() as i64;
        lock(seen).calls.push(Call {
            op,
            code,
            call_ns,
            ret_ns,
            said,
        });
        (code, stdout)
    }
}

/// The lock, even when another client panicked while holding it.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn any_node(rng: &mut Rng) -> &'static str {
    NODES[rng.below(NODES.len())]
}

/// The script of chain level `depth`: reports (wakeup), spawns the next level (continuable)
/// and a one-shot child on random nodes, replies; echoes every later followup.
fn level(rng: &mut Rng, depth: usize) -> Value {
    let mut steps = vec![
        json!({"do": "report", "content": format!("level {depth} started"), "delivery": "wakeup"}),
    ];
    if depth < CHAIN {
        let next = level(rng, depth + 1);
        steps.push(spawn_step("continuable", any_node(rng), "go deeper", next));
    }
    // The last level's one-shot is at the cluster's max depth ([`MAX_DEPTH`]): it tries to
    // spawn one level deeper, which must be refused (its turn then fails).
    let one_shot = if depth == CHAIN {
        json!({"turns": [[
            spawn_step("one-shot", any_node(rng), "too deep",
                json!({"turns": [[{"do": "reply", "content": "too deep"}]]})),
            {"do": "reply", "content": "counted"}
        ]]})
    } else {
        json!({"turns": [[{"do": "reply", "content": "counted"}]]})
    };
    steps.push(spawn_step("one-shot", any_node(rng), "count", one_shot));
    steps.push(json!({"do": "reply", "content": format!("level {depth} done")}));
    json!({"turns": [steps], "after": {"do": "echo"}})
}

/// A budgeted root's script: [`BUDGET_CHILDREN`] one-shot children on random nodes, each
/// reporting [`CHILD_TOKENS`] of usage before it replies.
fn budgeted(rng: &mut Rng) -> Value {
    let mut steps = Vec::new();
    for _ in 0..BUDGET_CHILDREN {
        steps.push(spawn_step(
            "one-shot",
            any_node(rng),
            "spend",
            json!({"turns": [[
                {"do": "usage", "tokens": CHILD_TOKENS},
                {"do": "reply", "content": "spent"}
            ]]}),
        ));
    }
    steps.push(json!({"do": "reply", "content": "delegated"}));
    json!({"turns": [steps], "after": {"do": "echo"}})
}

/// One client: trees until `target.until`, at most `max_trees`.
pub fn client(id: usize, seed: u64, max_trees: usize, target: Target, seen: Arc<Mutex<Seen>>) {
    let mut rng = Rng::new(seed ^ ((id as u64 + 1) * 104_729));
    for t in 0..max_trees {
        if Instant::now() >= target.until {
            break;
        }
        let request = format!("chaos-{seed}-{id}-{t}");
        let with_budget = t % 3 == 2;
        let root_script = if with_budget {
            budgeted(&mut rng)
        } else {
            json!({
                "turns": [[spawn_step("continuable", any_node(&mut rng), "start", level(&mut rng, 1))]],
                "after": {"do": "echo"}
            })
        };
        let node = any_node(&mut rng);
        let budget = BUDGET_TOKENS.to_string();
        let script = root_script.to_string();
        let mut args = vec![
            "--json",
            "spawn",
            "--node",
            node,
            "--prompt",
            "go",
            "--request-id",
            &request,
            "--script",
            &script,
        ];
        if with_budget {
            args.extend(["--budget-tokens", &budget]);
        }
        let (code, out) = target.cli(&seen, "spawn", &args);
        let root = serde_json::from_str::<Value>(out.trim())
            .ok()
            .and_then(|v| v["session"].as_str().map(str::to_owned));
        {
            let mut s = lock(&seen);
            match (code, &root) {
                (0, Some(root)) => {
                    s.spawned.insert(request.clone(), root.clone());
                    if with_budget {
                        s.budgeted.insert(root.clone());
                    }
                }
                // A refusal is an answer; anything else may or may not have happened.
                (4, _) => {}
                _ => {
                    s.unknown_spawns.insert(request.clone());
                }
            }
        }
        let Some(root) = root else { continue };
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(300 + rng.below(700) as u64));
            let (_, out) = target.cli(&seen, "tree", &["--json", "tree", &root]);
            let tree: Vec<String> = serde_json::from_str::<Value>(out.trim())
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|r| r["session"].as_str().map(str::to_owned))
                .collect();
            let Some(picked) = tree.get(rng.below(tree.len().max(1))).cloned() else {
                continue;
            };
            match rng.below(3) {
                0 => {
                    target.cli(&seen, "send", &["send", &picked, "more work"]);
                }
                1 if picked != root => {
                    target.cli(
                        &seen,
                        "interrupt",
                        &["interrupt", &picked, "--as-ancestor", &root],
                    );
                }
                _ => {
                    target.cli(&seen, "status", &["status"]);
                }
            }
        }
        if !with_budget && rng.below(3) == 0 {
            let (code, _) = target.cli(&seen, "drain", &["drain", &root]);
            if code == 0 {
                let at = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                lock(&seen).drained.insert(root, at);
            }
        }
    }
}
