//! The node's `/metrics` page (O2): OpenMetrics text, encoded by `prometheus-client` from a
//! snapshot of the node's counters taken at each scrape ([`MetricsPage`], a `Collector`).
//!
//! Every series has a `lineage_node` label (the node's id; not `node`, which Kubernetes
//! service discovery and kube-state-metrics use for the machine). Counters are written `<family>_total`; latencies are
//! histograms (`_bucket{le}`, `_sum`, `_count`; bounds from 5 ms to 60 s). Families:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `lineage_live_agents` | gauge | agents live on this node |
//! | `lineage_nats_connected`, `lineage_nats_reconnects_total` | gauge, counter | this node's NATS connection: up now; made again since start |
//! | `lineage_agents{activity}` | gauge | of those, `in_turn` (a turn runs now) and `idle` |
//! | `lineage_sessions{state}` | gauge | sessions in the registry by state (`running`, `waiting`, `settled`, `disposed`), from this node's stale read: registry-wide, so every node shows the same counts (aggregate with `max()`, not `sum()`) |
//! | `lineage_spawns_total{shape}` | counter | sessions registered by this node (`top-level`, `continuable`, `one-shot`) |
//! | `lineage_settlements_total{stop_reason}` | counter | settlements committed by agents of this node |
//! | `lineage_resumes_total` | counter | cold resumes done here |
//! | `lineage_reports_total` | counter | reports published to a parent inbox |
//! | `lineage_inbox_publish_failures_total` | counter | reports and notices still unpublished when the node shut down (they are retried until then) |
//! | `lineage_inbox_accepted_total` | counter | inbox messages accepted into a live parent's log |
//! | `lineage_inbox_duplicates_total` | counter | inbox redeliveries skipped (already in the log) |
//! | `lineage_inbox_lag_seconds` | histogram | accepted time minus the message's `at_ms` |
//! | `lineage_inbox_lag_max_seconds` | gauge | the largest such lag since start |
//! | `lineage_drains_total` / `lineage_drain_failures_total` | counter | drains coordinated here |
//! | `lineage_drain_duration_seconds` | histogram | duration of completed drains |
//! | `lineage_turn_duration_seconds` | histogram | duration of the turns taken here |
//! | `lineage_spawn_duration_seconds` | histogram | spawns of top-level and continuable sessions answered here, from the request to the session live (a one-shot's reply waits for its run: not counted) |
//! | `lineage_registry_write_duration_seconds` | histogram | this node's registry writes, each from the request to the registry's answer (a write tried again after the registry was unavailable counts once per try) |
//! | `lineage_settlement_duration_seconds` | histogram | settlements committed here (log flush and registry write) |
//! | `lineage_refusals_total{reason}` | counter | spawns refused here, by the rule that refused (`depth_exceeded`, `fan_out_exceeded`, `budget_spent`, `admission_closed`, `bad_request`, ...) |
//! | `lineage_agent_context_tokens` | gauge | tokens in the context of the agents live here, as they last reported |
//! | `lineage_agent_cost_total{currency}` | counter | cost the agents of this node reported, in the currency's units |
//! | `lineage_build_info{version}` | gauge | 1, with the build's version |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds` | counter, gauge | this process, from `/proc/self` (Linux) |
//! | `lineage_raft_term`, `lineage_raft_leader`, `lineage_raft_commit_index`, `lineage_raft_applied_index`, `lineage_raft_last_log_index`, `lineage_raft_purged_index` | gauge | voters only |
//! | `lineage_raft_rpc_unanswered_total` | counter | voters only: openraft's RPCs that timed out or found nobody, not logged ([`crate::raft_noise`]) |
//! | `lineage_registry_load_seconds`, `lineage_registry_snapshot_build_seconds`, `lineage_registry_snapshot_install_seconds` | gauge | voters only: the last load at open, snapshot build, snapshot install |
//! | `lineage_registry_snapshot_bytes`, `lineage_registry_snapshots_built_total`, `lineage_registry_snapshots_installed_total` | gauge, counter | voters only: size of the last snapshot built, snapshots built and installed since start |
//! | `lineage_registry_request_results` | gauge | voters only: accepted commands' results kept for retries by request id (`retention.request_results_ms`) |
//! | `lineage_otlp_spans_exported_total`, `_failed_total` | counter | when OTLP export is on |

use std::collections::BTreeMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use lineage_host::HostMetricsSnapshot;

use crate::otlp::OtlpStats;

mod out;
use out::Out;

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
    /// Unanswered Raft RPCs counted instead of logged ([`crate::raft_noise`]).
    pub unanswered_rpcs: u64,
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
            unanswered_rpcs: crate::raft_noise::unanswered_rpcs(),
        }
    }
}

/// This node's NATS connection, as its client counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NatsView {
    /// Connected now.
    pub connected: bool,
    /// Connections made since start (the first one included).
    pub connects: u64,
}

/// Everything one `/metrics` page shows.
#[derive(Debug, Clone, Default)]
pub struct MetricsPage {
    /// This node.
    pub node: String,
    /// Live agents here.
    pub live_agents: usize,
    /// Of those, the ones in a turn now (the others are idle).
    pub in_turn: usize,
    /// This node's NATS connection: connected now, and connections made since start (the
    /// first one included).
    pub nats: NatsView,
    /// The host's counters.
    pub host: HostMetricsSnapshot,
    /// Tokens in the context of the agents live here, as they last reported.
    pub context_tokens: u64,
    /// The process's own figures, where `/proc` has them.
    pub process: Option<crate::process::ProcessFigures>,
    /// Sessions by state, when the registry answered.
    pub sessions: Option<BTreeMap<String, u64>>,
    /// Raft, on a voter.
    pub raft: Option<RaftView>,
    /// The registry member's store, on a voter.
    pub store: Option<lineage_registry::store_stats::StoreFigures>,
    /// OTLP export, when on.
    pub otlp: Option<OtlpStats>,
}

/// The media type of [`MetricsPage::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One scrape's families, encoded by `prometheus-client` from a [`MetricsPage`].
#[derive(Debug)]
struct Families(MetricsPage);

impl Collector for Families {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let page = &self.0;
        let h = &page.host;
        let mut out = Out {
            encoder,
            node: &page.node,
        };
        out.one(
            "lineage_live_agents",
            "Agents live on this node.",
            page.live_agents as f64,
        )?;
        out.one(
            "lineage_nats_connected",
            "1 while this node's NATS connection is up, 0 while it reconnects.",
            if page.nats.connected { 1.0 } else { 0.0 },
        )?;
        out.counter(
            "lineage_nats_reconnects",
            "Times this node's NATS connection was made again since start.",
            &[(&[], page.nats.connects.saturating_sub(1))],
        )?;
        let idle = page.live_agents.saturating_sub(page.in_turn) as f64;
        out.gauge(
            "lineage_agents",
            "Agents live on this node by activity: in a turn now, or idle (waiting for a message).",
            &[
                (&[("activity", "in_turn")], page.in_turn as f64),
                (&[("activity", "idle")], idle),
            ],
        )?;
        if let Some(sessions) = &page.sessions {
            let samples: Vec<([(&str, &str); 1], f64)> = sessions
                .iter()
                .map(|(state, n)| ([("state", state.as_str())], *n as f64))
                .collect();
            let samples: Vec<(&[(&str, &str)], f64)> =
                samples.iter().map(|(l, v)| (&l[..], *v)).collect();
            out.gauge(
                "lineage_sessions",
                "Sessions in the registry by state: registry-wide, the same on every node (this node's stale read); aggregate across nodes with max(), not sum().",
                &samples,
            )?;
        }
        let by = |key: &'static str,
                  values: &[(&'static str, u64)]|
         -> Vec<([(&'static str, &'static str); 1], u64)> {
            values.iter().map(|(v, n)| ([(key, *v)], *n)).collect()
        };
        let spawns = by("shape", &h.spawns);
        let spawns: Vec<(&[(&str, &str)], u64)> =
            spawns.iter().map(|(l, v)| (&l[..], *v)).collect();
        out.counter(
            "lineage_spawns",
            "Sessions registered by this node, by shape.",
            &spawns,
        )?;
        let settled = by("stop_reason", &h.settlements);
        let settled: Vec<(&[(&str, &str)], u64)> =
            settled.iter().map(|(l, v)| (&l[..], *v)).collect();
        out.counter(
            "lineage_settlements",
            "Settlements committed by agents of this node, by stop reason.",
            &settled,
        )?;
        for (name, help, value) in [
            ("lineage_resumes", "Cold resumes done on this node.", h.resumes),
            ("lineage_reports", "Reports published to a parent inbox.", h.reports),
            (
                "lineage_inbox_publish_failures",
                "Reports and settlement notices still unpublished when the node shut down (retried until then).",
                h.inbox_publish_failures,
            ),
            (
                "lineage_inbox_accepted",
                "Inbox messages accepted into a live parent's log.",
                h.inbox_accepted,
            ),
            (
                "lineage_inbox_duplicates",
                "Inbox redeliveries skipped because the parent's log already held them.",
                h.inbox_duplicates,
            ),
            ("lineage_drains", "Drains coordinated by this node that completed.", h.drains),
            (
                "lineage_drain_failures",
                "Drains coordinated by this node that failed.",
                h.drain_failures,
            ),
        ] {
            out.counter(name, help, &[(&[], value)])?;
        }
        out.histogram(
            "lineage_inbox_lag_seconds",
            "Time from a report or notice being sent (its at_ms) to its acceptance by the parent.",
            &h.inbox_lag,
        )?;
        out.one(
            "lineage_inbox_lag_max_seconds",
            "The largest inbox lag seen since the node started.",
            h.inbox_lag_ms_max as f64 / 1000.0,
        )?;
        out.histogram(
            "lineage_drain_duration_seconds",
            "Duration of the completed drains coordinated by this node.",
            &h.drain_duration,
        )?;
        out.histogram(
            "lineage_turn_duration_seconds",
            "Duration of the turns taken on this node, however they ended.",
            &h.turn_duration,
        )?;
        out.histogram(
            "lineage_spawn_duration_seconds",
            "Spawns of top-level and continuable sessions answered by this node, from the request to the session live (one-shot spawns, whose reply waits for the run, are not counted).",
            &h.spawn_duration,
        )?;
        out.histogram(
            "lineage_registry_write_duration_seconds",
            "This node's registry writes, each from the request to the registry's answer (once per try).",
            &h.registry_write_duration,
        )?;
        out.histogram(
            "lineage_settlement_duration_seconds",
            "Settlements committed on this node: the log flush and the registry write.",
            &h.settlement_duration,
        )?;
        let refusals: Vec<([(&str, &str); 1], u64)> = h
            .refusals
            .iter()
            .map(|(reason, n)| ([("reason", *reason)], *n))
            .collect();
        let refusals: Vec<(&[(&str, &str)], u64)> =
            refusals.iter().map(|(l, v)| (&l[..], *v)).collect();
        out.counter(
            "lineage_refusals",
            "Spawns refused by this node, by the rule that refused them.",
            &refusals,
        )?;
        out.one(
            "lineage_agent_context_tokens",
            "Tokens in the context of the agents live on this node, as they last reported.",
            page.context_tokens as f64,
        )?;
        out.cost(&h.cost_micros)?;
        out.gauge(
            "lineage_build_info",
            "This build: always 1, its version as a label.",
            &[(&[("version", env!("CARGO_PKG_VERSION"))], 1.0)],
        )?;
        if let Some(r) = &page.raft {
            for (name, help, value) in [
                ("lineage_raft_term", "Current Raft term.", r.term),
                ("lineage_raft_leader", "Raft id of the current leader (0: none known).", r.leader),
                (
                    "lineage_raft_commit_index",
                    "Highest log index known committed (leader: held by a majority; follower: last applied).",
                    r.commit_index,
                ),
                ("lineage_raft_applied_index", "Last applied log index.", r.applied_index),
                (
                    "lineage_raft_last_log_index",
                    "Last log index in this member's log.",
                    r.last_log_index,
                ),
                (
                    "lineage_raft_purged_index",
                    "Last log index purged behind a snapshot (a follower behind it catches up by snapshot).",
                    r.purged_index,
                ),
            ] {
                out.one(name, help, value as f64)?;
            }
            out.counter(
                "lineage_raft_rpc_unanswered",
                "Raft RPCs to a member that timed out or found nobody (openraft retries them; counted here instead of logged as errors).",
                &[(&[], r.unanswered_rpcs)],
            )?;
        }
        if let Some(f) = &page.store {
            for (name, help, value) in [
                (
                    "lineage_registry_load_seconds",
                    "Time the registry member took at open to read its snapshot and rebuild its state.",
                    f.load.as_secs_f64(),
                ),
                (
                    "lineage_registry_snapshot_build_seconds",
                    "Time the last snapshot build took (encode the state, write it durably).",
                    f.build.as_secs_f64(),
                ),
                (
                    "lineage_registry_snapshot_bytes",
                    "Size of the last snapshot built.",
                    f.build_bytes as f64,
                ),
                (
                    "lineage_registry_snapshot_install_seconds",
                    "Time the last snapshot install took (decode, write durably, swap the state).",
                    f.install.as_secs_f64(),
                ),
                (
                    "lineage_registry_request_results",
                    "Accepted commands' results the registry keeps for retries by request id (retention.request_results_ms).",
                    f.request_results as f64,
                ),
            ] {
                out.one(name, help, value)?;
            }
            out.counter(
                "lineage_registry_snapshots_built",
                "Snapshots built since start.",
                &[(&[], f.built_total)],
            )?;
            out.counter(
                "lineage_registry_snapshots_installed",
                "Snapshots received from a leader and installed since start.",
                &[(&[], f.installed_total)],
            )?;
        }
        if let Some(p) = &page.process {
            out.process(p)?;
        }
        if let Some(o) = &page.otlp {
            for (name, help, value) in [
                (
                    "lineage_otlp_spans_exported",
                    "Spans accepted by the OTLP collector.",
                    o.exported,
                ),
                (
                    "lineage_otlp_spans_failed",
                    "Spans in OTLP exports that failed (after the exporter's retries).",
                    o.failed,
                ),
            ] {
                out.counter(name, help, &[(&[], value)])?;
            }
        }
        Ok(())
    }
}

impl MetricsPage {
    /// The OpenMetrics text ([`CONTENT_TYPE`]), encoded by `prometheus-client`.
    pub fn render(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Families(self.clone())));
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
            tracing::warn!(error = %e, "cannot encode the metrics page");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text_with_help_type_and_lineage_node_labels() {
        let page = MetricsPage {
            node: "node-1".into(),
            live_agents: 2,
            in_turn: 1,
            nats: NatsView {
                connected: true,
                connects: 3,
            },
            host: HostMetricsSnapshot {
                spawns: vec![("top-level", 1), ("continuable", 3), ("one-shot", 0)],
                settlements: vec![("completed", 2), ("disposed", 1)],
                inbox_accepted: 4,
                inbox_lag: lineage_host::LatencyHistogram {
                    buckets: vec![1, 0, 0, 0, 2, 0, 0, 1, 0, 0, 0, 0, 0],
                    count: 4,
                    sum_ms: 1234,
                },
                inbox_lag_ms_max: 900,
                drains: 1,
                drain_duration: lineage_host::LatencyHistogram {
                    buckets: vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                    count: 1,
                    sum_ms: 45,
                },
                refusals: vec![("fan_out_exceeded", 3)],
                cost_micros: vec![("USD".to_owned(), 250_000)],
                ..Default::default()
            },
            context_tokens: 1200,
            process: Some(crate::process::ProcessFigures {
                cpu_seconds: 1.5,
                open_fds: 9,
                ..Default::default()
            }),
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
                unanswered_rpcs: 7,
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
                failed: 1,
            }),
        };
        let text = page.render();
        for line in [
            "# TYPE lineage_spawns counter",
            "lineage_spawns_total{lineage_node=\"node-1\",shape=\"continuable\"} 3",
            "lineage_settlements_total{lineage_node=\"node-1\",stop_reason=\"completed\"} 2",
            "lineage_sessions{lineage_node=\"node-1\",state=\"settled\"} 1.0",
            "# TYPE lineage_inbox_lag_seconds histogram",
            "lineage_inbox_lag_seconds_sum{lineage_node=\"node-1\"} 1.234",
            "lineage_inbox_lag_seconds_count{lineage_node=\"node-1\"} 4",
            "lineage_inbox_lag_seconds_bucket{le=\"0.005\",lineage_node=\"node-1\"} 1",
            "lineage_inbox_lag_seconds_bucket{le=\"0.1\",lineage_node=\"node-1\"} 3",
            "lineage_inbox_lag_seconds_bucket{le=\"1.0\",lineage_node=\"node-1\"} 4",
            "lineage_inbox_lag_seconds_bucket{le=\"+Inf\",lineage_node=\"node-1\"} 4",
            "lineage_inbox_lag_max_seconds{lineage_node=\"node-1\"} 0.9",
            "lineage_drain_duration_seconds_sum{lineage_node=\"node-1\"} 0.045",
            "lineage_drain_duration_seconds_count{lineage_node=\"node-1\"} 1",
            "lineage_raft_commit_index{lineage_node=\"node-1\"} 10.0",
            "lineage_raft_purged_index{lineage_node=\"node-1\"} 4.0",
            "lineage_raft_rpc_unanswered_total{lineage_node=\"node-1\"} 7",
            "lineage_otlp_spans_failed_total{lineage_node=\"node-1\"} 1",
            "lineage_registry_snapshot_build_seconds{lineage_node=\"node-1\"} 1.5",
            "lineage_registry_snapshot_bytes{lineage_node=\"node-1\"} 4096.0",
            "lineage_registry_snapshots_built_total{lineage_node=\"node-1\"} 2",
            "lineage_registry_request_results{lineage_node=\"node-1\"} 17.0",
            "lineage_live_agents{lineage_node=\"node-1\"} 2.0",
            "lineage_nats_connected{lineage_node=\"node-1\"} 1.0",
            "lineage_nats_reconnects_total{lineage_node=\"node-1\"} 2",
            "lineage_agents{lineage_node=\"node-1\",activity=\"in_turn\"} 1.0",
            "lineage_agents{lineage_node=\"node-1\",activity=\"idle\"} 1.0",
            "lineage_refusals_total{lineage_node=\"node-1\",reason=\"fan_out_exceeded\"} 3",
            "lineage_agent_cost_total{lineage_node=\"node-1\",currency=\"USD\"} 0.25",
            "lineage_agent_context_tokens{lineage_node=\"node-1\"} 1200.0",
            "lineage_registry_write_duration_seconds_count{lineage_node=\"node-1\"} 0",
            "process_open_fds{lineage_node=\"node-1\"} 9.0",
            "process_cpu_seconds_total{lineage_node=\"node-1\"} 1.5",
            "# EOF",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // Every family has HELP and TYPE once, before its samples.
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split_whitespace().next().unwrap();
                assert!(typed.insert(name.to_owned()), "TYPE twice for {name}");
            } else if !line.starts_with('#') {
                let name = line.split('{').next().unwrap();
                let family = ["_total", "_sum", "_count", "_bucket"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                    .unwrap_or(name);
                assert!(typed.contains(family), "no TYPE before {line}");
            }
        }
    }
}
