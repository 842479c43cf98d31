//! The report of a chaos run: per fault kind, how many were injected, the operations that
//! overlapped them and how many of those failed, the longest wait a client saw while one was
//! on (p50 and max over the faults of the kind), and how long after the heal every node was
//! ready again; then the totals, the Porcupine verdict and every violation.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::faults::{Fault, Injected};
use super::registry::Recorded;
use super::trees::Seen;

/// What a run saw.
pub struct Report<'a> {
    /// The seed.
    pub seed: u64,
    /// How long the workloads and faults ran.
    pub duration: Duration,
    /// The tree clients' calls and outcomes.
    pub seen: &'a Seen,
    /// The registry clients' history.
    pub history: &'a [Recorded],
    /// The faults, in order.
    pub injected: &'a [Injected],
    /// The violations found.
    pub violations: &'a [String],
    /// What Porcupine said.
    pub porcupine: &'a str,
}

/// One operation's span, and whether it failed (no answer, or an exit the workload does not
/// expect: not 0, a bad request (a followup to a one-shot), a refusal or "no turn to
/// interrupt").
struct Span {
    call: i64,
    ret: i64,
    failed: bool,
    /// False for a registry operation that never got an outcome (its `ret` is an estimate).
    answered: bool,
}

/// One row of the table.
#[derive(Default)]
struct Row {
    injected: usize,
    operations: usize,
    failed: usize,
    waits_ms: Vec<u64>,
    recovered_ms: Vec<u64>,
}

fn p50_max(v: &mut [u64]) -> (u64, u64) {
    v.sort_unstable();
    (
        v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0),
        v.last().copied().unwrap_or(0),
    )
}

/// How long a registry operation without an outcome is counted as under way: its client's
/// deadline (`RegistryClient`'s default, 10 s).
const GIVEN_UP_AFTER_NS: i64 = 10_000_000_000;

impl Report<'_> {
    fn spans(&self) -> Vec<Span> {
        let mut spans: Vec<Span> = self
            .seen
            .calls
            .iter()
            .map(|c| Span {
                call: c.call_ns,
                ret: c.ret_ns,
                failed: !matches!(c.code, 0 | 2 | 3 | 4),
                answered: true,
            })
            .collect();
        // An operation without an outcome was given up by its client at its deadline: it
        // overlaps the faults until then, not every later one (it used to count as failed
        // during each fault of the rest of the run).
        spans.extend(self.history.iter().map(|o| Span {
            call: o.call_ns,
            ret: if o.ret_ns < 0 {
                o.call_ns.saturating_add(GIVEN_UP_AFTER_NS)
            } else {
                o.ret_ns
            },
            failed: o.ret_ns < 0,
            answered: o.ret_ns >= 0,
        }));
        spans
    }

    fn rows(&self) -> BTreeMap<Fault, Row> {
        let spans = self.spans();
        let mut rows: BTreeMap<Fault, Row> = BTreeMap::new();
        for f in self.injected {
            let row = rows.entry(f.fault).or_default();
            row.injected += 1;
            let during: Vec<&Span> = spans
                .iter()
                .filter(|s| s.call <= f.to_ns && s.ret >= f.from_ns)
                .collect();
            row.operations += during.len();
            row.failed += during.iter().filter(|s| s.failed).count();
            let longest = during
                .iter()
                .filter(|s| s.answered)
                .map(|s| (s.ret - s.call) / 1_000_000)
                .max()
                .unwrap_or(0);
            row.waits_ms.push(longest as u64);
            if let Some(d) = f.recovered {
                row.recovered_ms.push(d.as_millis() as u64);
            }
        }
        rows
    }

    /// Prints the table (or one JSON object with `--json`).
    pub fn print(&self, json: bool) {
        let rows = self.rows();
        let calls = self.seen.calls.len();
        let not_ok = self
            .seen
            .calls
            .iter()
            .filter(|c| !matches!(c.code, 0 | 2 | 3 | 4))
            .count();
        let unknown = self.history.iter().filter(|o| o.ret_ns < 0).count();
        if json {
            let kinds: Vec<_> = rows
                .into_iter()
                .map(|(fault, mut row)| {
                    let (wait_p50, wait_max) = p50_max(&mut row.waits_ms);
                    let (back_p50, back_max) = p50_max(&mut row.recovered_ms);
                    json!({"fault": fault.name(), "injected": row.injected,
                        "operations": row.operations, "failed": row.failed,
                        "longest_wait_ms": {"p50": wait_p50, "max": wait_max},
                        "ready_after_heal_ms": {"p50": back_p50, "max": back_max}})
                })
                .collect();
            println!(
                "{}",
                json!({
                    "seed": self.seed, "duration_s": self.duration.as_secs(),
                    "faults": kinds, "cli_calls": calls, "cli_calls_failed": not_ok,
                    "registry_operations": self.history.len(), "registry_unknown": unknown,
                    "roots_acknowledged": self.seen.spawned.len(),
                    "roots_unknown": self.seen.unknown_spawns.len(),
                    "roots_drained": self.seen.drained.len(),
                    "budgeted_roots": self.seen.budgeted.len(),
                    "cli_failures": self.seen.calls.iter()
                        .filter(|c| !matches!(c.code, 0 | 2 | 3 | 4))
                        .map(|c| json!({"op": c.op, "exit": c.code,
                            "at_s": c.call_ns as f64 / 1e9,
                            "took_s": (c.ret_ns - c.call_ns) as f64 / 1e9, "said": c.said}))
                        .collect::<Vec<_>>(),
                    "porcupine": self.porcupine.lines().next().unwrap_or(""),
                    "violations": self.violations,
                })
            );
            return;
        }
        println!(
            "chaos seed {}: {} s of faults; {} faults injected",
            self.seed,
            self.duration.as_secs(),
            self.injected.len()
        );
        println!(
            "| fault | injected | operations during | failed | longest wait p50 / max | every node ready after the heal p50 / max |"
        );
        println!("|---|---|---|---|---|---|");
        for (fault, mut row) in rows {
            let (wait_p50, wait_max) = p50_max(&mut row.waits_ms);
            let (back_p50, back_max) = p50_max(&mut row.recovered_ms);
            println!(
                "| {} | {} | {} | {} | {wait_p50} / {wait_max} ms | {back_p50} / {back_max} ms |",
                fault.name(),
                row.injected,
                row.operations,
                row.failed
            );
        }
        let mut by_verb: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for c in &self.seen.calls {
            let entry = by_verb.entry(c.op).or_default();
            entry.0 += 1;
            entry.1 += usize::from(!matches!(c.code, 0 | 2 | 3 | 4));
        }
        let by_verb: Vec<String> = by_verb
            .iter()
            .map(|(op, (n, failed))| format!("{op} {n} ({failed} failed)"))
            .collect();
        println!(
            "tree workload: {calls} CLI calls ({not_ok} failed: {}), {} roots acknowledged, {} unknown, {} drained, {} budgeted",
            by_verb.join(", "),
            self.seen.spawned.len(),
            self.seen.unknown_spawns.len(),
            self.seen.drained.len(),
            self.seen.budgeted.len()
        );
        println!(
            "registry workload: {} operations ({unknown} without an outcome); Porcupine: {}",
            self.history.len(),
            self.porcupine.lines().next().unwrap_or("")
        );
        for c in self
            .seen
            .calls
            .iter()
            .filter(|c| !matches!(c.code, 0 | 2 | 3 | 4))
        {
            let during: Vec<String> = self
                .injected
                .iter()
                .filter(|f| c.call_ns <= f.to_ns && c.ret_ns >= f.from_ns)
                .map(|f| format!("{} on {}", f.fault.slug(), f.target))
                .collect();
            println!(
                "  failed: {} at {:.1} s, exit {} after {:.1} s (during: {}): {}",
                c.op,
                c.call_ns as f64 / 1e9,
                c.code,
                (c.ret_ns - c.call_ns) as f64 / 1e9,
                if during.is_empty() {
                    "no fault".to_owned()
                } else {
                    during.join(", ")
                },
                c.said
            );
        }
        println!("violations: {}", self.violations.len());
        for v in self.violations.iter().take(40) {
            println!("  {v}");
        }
        if self.violations.len() > 40 {
            println!("  ... and {} more", self.violations.len() - 40);
        }
    }
}
