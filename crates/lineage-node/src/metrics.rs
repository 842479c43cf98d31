//! The node's `/metrics` page (O2): Prometheus text exposition format 0.0.4.
//!
//! Every series has a `node` label. Families:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `lineage_live_agents` | gauge | agents live on this node |
//! | `lineage_sessions{state}` | gauge | sessions in the registry by state (`running`, `waiting`, `settled`, `disposed`), from this node's stale read |
//! | `lineage_spawns_total{shape}` | counter | sessions registered by this node (`top-level`, `continuable`, `one-shot`) |
//! | `lineage_settlements_total{stop_reason}` | counter | settlements committed by agents of this node |
//! | `lineage_resumes_total` | counter | cold resumes done here |
//! | `lineage_reports_total` | counter | reports published to a parent inbox |
//! | `lineage_inbox_publish_failures_total` | counter | reports and notices still unpublished when the node shut down (they are retried until then) |
//! | `lineage_inbox_accepted_total` | counter | inbox messages accepted into a live parent's log |
//! | `lineage_inbox_duplicates_total` | counter | inbox redeliveries skipped (already in the log) |
//! | `lineage_inbox_lag_seconds` | summary (`_sum`, `_count`) | accepted time minus the message's `at_ms` |
//! | `lineage_inbox_lag_max_seconds` | gauge | the largest such lag since start |
//! | `lineage_drains_total` / `lineage_drain_failures_total` | counter | drains coordinated here |
//! | `lineage_drain_duration_seconds` | summary (`_sum`, `_count`) | duration of completed drains |
//! | `lineage_raft_term`, `lineage_raft_leader`, `lineage_raft_commit_index`, `lineage_raft_applied_index`, `lineage_raft_last_log_index`, `lineage_raft_purged_index` | gauge | voters only |
//! | `lineage_registry_load_seconds`, `lineage_registry_snapshot_build_seconds`, `lineage_registry_snapshot_install_seconds` | gauge | voters only: the last load at open, snapshot build, snapshot install |
//! | `lineage_registry_snapshot_bytes`, `lineage_registry_snapshots_built_total`, `lineage_registry_snapshots_installed_total` | gauge, counter | voters only: size of the last snapshot built, snapshots built and installed since start |
//! | `lineage_registry_request_results` | gauge | voters only: accepted commands' results kept for retries by request id (`retention.request_results_ms`) |
//! | `lineage_otlp_spans_exported_total`, `_dropped_total`, `_failed_total` | counter | when OTLP export is on |

use std::collections::BTreeMap;
use std::fmt::Write as _;

use lineage_host::HostMetricsSnapshot;

use crate::otlp::OtlpStats;

/// What a voter's Raft member reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RaftView {
    /// Current term.
    pub term: u64,
    /// Raft id of the leader (0: none known).
    pub leader: u64,
    /// Highest index known committed: on the leader, the index a majority of voters hold;
    /// elsewhere the last applied index (applied entries are committed: a lower bound).
    pub commit_index: u64,
    /// Last applied index.
    pub applied_index: u64,
    /// Last index in the local log.
    pub last_log_index: u64,
    /// Last index purged from the local log (behind a snapshot).
    pub purged_index: u64,
}

impl RaftView {
    /// Reads a member's metrics.
    pub fn from_metrics(m: &lineage_registry::raft_types::Metrics) -> Self {
        let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
        let voters: Vec<u64> = m.membership_config.voter_ids().collect();
        let quorum = match &m.replication {
            Some(progress) if !voters.is_empty() => {
                let mut matched: Vec<u64> = voters
                    .iter()
                    .map(|v| {
                        progress
                            .get(v)
                            .and_then(|l| l.as_ref())
                            .map(|l| l.index)
                            .unwrap_or(0)
                    })
                    .collect();
                matched.sort_unstable_by(|a, b| b.cmp(a));
                // A majority (n/2 + 1 voters) holds at least this index.
                matched.get(voters.len() / 2).copied().unwrap_or(0)
            }
            _ => 0,
        };
        RaftView {
            term: m.current_term,
            leader: m.current_leader.unwrap_or(0),
            commit_index: quorum.max(applied),
            applied_index: applied,
            last_log_index: m.last_log_index.unwrap_or(0),
            purged_index: m.purged.map(|l| l.index).unwrap_or(0),
        }
    }
}

/// Everything one `/metrics` page shows.
#[derive(Debug, Clone, Default)]
pub struct MetricsPage {
    /// This node.
    pub node: String,
    /// Live agents here.
    pub live_agents: usize,
    /// The host's counters.
    pub host: HostMetricsSnapshot,
    /// Sessions by state, when the registry answered.
    pub sessions: Option<BTreeMap<String, u64>>,
    /// Raft, on a voter.
    pub raft: Option<RaftView>,
    /// The registry member's store, on a voter.
    pub store: Option<lineage_registry::store_stats::StoreFigures>,
    /// OTLP export, when on.
    pub otlp: Option<OtlpStats>,
}

struct Prom {
    out: String,
    node: String,
}

impl Prom {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let _ = write!(self.out, "{name}{{node=\"{}\"", escape(&self.node));
        for (k, v) in labels {
            let _ = write!(self.out, ",{k}=\"{}\"", escape(v));
        }
        let _ = writeln!(self.out, "}} {value}");
    }

    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

impl MetricsPage {
    /// The Prometheus text.
    pub fn render(&self) -> String {
        let mut p = Prom {
            out: String::new(),
            node: self.node.clone(),
        };
        let h = &self.host;
        p.single(
            "lineage_live_agents",
            "gauge",
            "Agents live on this node.",
            self.live_agents,
        );
        if let Some(sessions) = &self.sessions {
            p.family(
                "lineage_sessions",
                "gauge",
                "Sessions in the registry by state (this node's stale read).",
            );
            for (state, n) in sessions {
                p.sample("lineage_sessions", &[("state", state)], n);
            }
        }
        p.family(
            "lineage_spawns_total",
            "counter",
            "Sessions registered by this node, by shape.",
        );
        for (shape, n) in &h.spawns {
            p.sample("lineage_spawns_total", &[("shape", shape)], n);
        }
        p.family(
            "lineage_settlements_total",
            "counter",
            "Settlements committed by agents of this node, by stop reason.",
        );
        for (reason, n) in &h.settlements {
            p.sample("lineage_settlements_total", &[("stop_reason", reason)], n);
        }
        p.single(
            "lineage_resumes_total",
            "counter",
            "Cold resumes done on this node.",
            h.resumes,
        );
        p.single(
            "lineage_reports_total",
            "counter",
            "Reports published to a parent inbox.",
            h.reports,
        );
        p.single(
            "lineage_inbox_publish_failures_total",
            "counter",
            "Reports and settlement notices still unpublished when the node shut down (retried until then).",
            h.inbox_publish_failures,
        );
        p.single(
            "lineage_inbox_accepted_total",
            "counter",
            "Inbox messages accepted into a live parent's log.",
            h.inbox_accepted,
        );
        p.single(
            "lineage_inbox_duplicates_total",
            "counter",
            "Inbox redeliveries skipped because the parent's log already held them.",
            h.inbox_duplicates,
        );
        p.family(
            "lineage_inbox_lag_seconds",
            "summary",
            "Time from a report or notice being sent (its at_ms) to its acceptance by the parent.",
        );
        p.sample(
            "lineage_inbox_lag_seconds_sum",
            &[],
            seconds(h.inbox_lag_ms_sum),
        );
        p.sample("lineage_inbox_lag_seconds_count", &[], h.inbox_accepted);
        p.single(
            "lineage_inbox_lag_max_seconds",
            "gauge",
            "The largest inbox lag seen since the node started.",
            seconds(h.inbox_lag_ms_max),
        );
        p.single(
            "lineage_drains_total",
            "counter",
            "Drains coordinated by this node that completed.",
            h.drains,
        );
        p.single(
            "lineage_drain_failures_total",
            "counter",
            "Drains coordinated by this node that failed.",
            h.drain_failures,
        );
        p.family(
            "lineage_drain_duration_seconds",
            "summary",
            "Duration of the completed drains coordinated by this node.",
        );
        p.sample(
            "lineage_drain_duration_seconds_sum",
            &[],
            seconds(h.drain_ms_sum),
        );
        p.sample("lineage_drain_duration_seconds_count", &[], h.drains);
        if let Some(r) = &self.raft {
            p.single("lineage_raft_term", "gauge", "Current Raft term.", r.term);
            p.single(
                "lineage_raft_leader",
                "gauge",
                "Raft id of the current leader (0: none known).",
                r.leader,
            );
            p.single(
                "lineage_raft_commit_index",
                "gauge",
                "Highest log index known committed (leader: held by a majority; follower: last applied).",
                r.commit_index,
            );
            p.single(
                "lineage_raft_applied_index",
                "gauge",
                "Last applied log index.",
                r.applied_index,
            );
            p.single(
                "lineage_raft_last_log_index",
                "gauge",
                "Last log index in this member's log.",
                r.last_log_index,
            );
            p.single(
                "lineage_raft_purged_index",
                "gauge",
                "Last log index purged behind a snapshot (a follower behind it catches up by snapshot).",
                r.purged_index,
            );
        }
        if let Some(f) = &self.store {
            let secs = |d: std::time::Duration| format!("{:.3}", d.as_secs_f64());
            p.single(
                "lineage_registry_load_seconds",
                "gauge",
                "Time the registry member took at open to read its snapshot and rebuild its state.",
                secs(f.load),
            );
            p.single(
                "lineage_registry_snapshot_build_seconds",
                "gauge",
                "Time the last snapshot build took (encode the state, write it durably).",
                secs(f.build),
            );
            p.single(
                "lineage_registry_snapshot_bytes",
                "gauge",
                "Size of the last snapshot built.",
                f.build_bytes,
            );
            p.single(
                "lineage_registry_snapshots_built_total",
                "counter",
                "Snapshots built since start.",
                f.built_total,
            );
            p.single(
                "lineage_registry_snapshot_install_seconds",
                "gauge",
                "Time the last snapshot install took (decode, write durably, swap the state).",
                secs(f.install),
            );
            p.single(
                "lineage_registry_snapshots_installed_total",
                "counter",
                "Snapshots received from a leader and installed since start.",
                f.installed_total,
            );
            p.single(
                "lineage_registry_request_results",
                "gauge",
                "Accepted commands' results the registry keeps for retries by request id (retention.request_results_ms).",
                f.request_results,
            );
        }
        if let Some(o) = &self.otlp {
            p.single(
                "lineage_otlp_spans_exported_total",
                "counter",
                "Spans accepted by the OTLP collector.",
                o.exported,
            );
            p.single(
                "lineage_otlp_spans_dropped_total",
                "counter",
                "Spans dropped because the export queue was full.",
                o.dropped,
            );
            p.single(
                "lineage_otlp_spans_failed_total",
                "counter",
                "Spans lost in failed OTLP requests.",
                o.failed,
            );
        }
        p.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text_with_help_type_and_node_labels() {
        let page = MetricsPage {
            node: "node-1".into(),
            live_agents: 2,
            host: HostMetricsSnapshot {
                spawns: vec![("top-level", 1), ("continuable", 3), ("one-shot", 0)],
                settlements: vec![("completed", 2), ("disposed", 1)],
                inbox_accepted: 4,
                inbox_lag_ms_sum: 1234,
                inbox_lag_ms_max: 900,
                drains: 1,
                drain_ms_sum: 45,
                ..Default::default()
            },
            sessions: Some(
                [("running".to_owned(), 2), ("settled".to_owned(), 1)]
                    .into_iter()
                    .collect(),
            ),
            raft: Some(RaftView {
                term: 3,
                leader: 1,
                commit_index: 10,
                applied_index: 9,
                last_log_index: 11,
                purged_index: 4,
            }),
            store: Some(lineage_registry::store_stats::StoreFigures {
                build: std::time::Duration::from_millis(1500),
                build_bytes: 4096,
                built_total: 2,
                request_results: 17,
                ..Default::default()
            }),
            otlp: Some(OtlpStats {
                exported: 5,
                dropped: 0,
                failed: 1,
            }),
        };
        let text = page.render();
        for line in [
            "# TYPE lineage_spawns_total counter",
            "lineage_spawns_total{node=\"node-1\",shape=\"continuable\"} 3",
            "lineage_settlements_total{node=\"node-1\",stop_reason=\"completed\"} 2",
            "lineage_sessions{node=\"node-1\",state=\"settled\"} 1",
            "lineage_inbox_lag_seconds_sum{node=\"node-1\"} 1.234",
            "lineage_inbox_lag_seconds_count{node=\"node-1\"} 4",
            "lineage_inbox_lag_max_seconds{node=\"node-1\"} 0.900",
            "lineage_drain_duration_seconds_sum{node=\"node-1\"} 0.045",
            "lineage_raft_commit_index{node=\"node-1\"} 10",
            "lineage_raft_purged_index{node=\"node-1\"} 4",
            "lineage_otlp_spans_failed_total{node=\"node-1\"} 1",
            "lineage_registry_snapshot_build_seconds{node=\"node-1\"} 1.500",
            "lineage_registry_snapshot_bytes{node=\"node-1\"} 4096",
            "lineage_registry_snapshots_built_total{node=\"node-1\"} 2",
            "lineage_registry_request_results{node=\"node-1\"} 17",
            "lineage_live_agents{node=\"node-1\"} 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // Every sample's family has HELP and TYPE before it, once.
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split_whitespace().next().unwrap();
                assert!(typed.insert(name.to_owned()), "TYPE twice for {name}");
            } else if !line.starts_with('#') {
                let name = line.split('{').next().unwrap();
                let family = ["_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                    .unwrap_or(name);
                assert!(typed.contains(family), "no TYPE before {line}");
            }
        }
    }
}
