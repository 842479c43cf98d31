//! [`run`]: one `lineage` node — NATS connection, registry member (voters) or client, agent
//! host with the `lineage` control service, HTTP probes — until shutdown.

use lineage_registry::raft_types;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lineage_bus::Subjects;
use lineage_host::clock::SystemClock;
use lineage_host::host::{Host, HostConfig, HostDeps};
use lineage_registry::{Consistency, RegistryClient, RegistryNode, RegistryNodeConfig};
use tokio_util::sync::CancellationToken;

use crate::config::{NodeConfig, RegistryRole};
use crate::drivers::NodeDrivers;
use crate::error::NodeError;
use crate::http::{self, Probe};
use crate::metrics::{MetricsPage, RaftView};
use lineage_drivers::tools::socket::ToolsSocket;

/// Runs a node until `shutdown` is cancelled. On shutdown (graceful, K1) the node leaves the
/// cluster-wide queue group (requests go to the other nodes), lets the turns already running
/// finish within `shutdown.grace_ms` and hands its idle sessions off (released: any node
/// resumes them at once, nothing interrupted; see `lineage_host::handoff`); then it stops
/// serving, stops what still runs without settling it (a turn that outlived the grace is
/// closed as interrupted by its next host), and closes its registry member cleanly.
pub async fn run(mut config: NodeConfig, shutdown: CancellationToken) -> Result<(), NodeError> {
    let node_id = config.node_id()?;
    resolve_isolation(&mut config)?;
    config
        .agents
        .check_secrets(&|name| std::env::var(name).ok())
        .map_err(|(key, why)| NodeError::Config(format!("invalid config key {key}: {why}")))?;
    let subjects = Subjects::new(&config.cluster).map_err(lineage_bus::BusError::from)?;
    std::fs::create_dir_all(&config.node.data_dir).map_err(|source| NodeError::Io {
        what: format!(
            "cannot create node.data_dir {}; pick a writable directory",
            config.node.data_dir.display()
        ),
        source,
    })?;
    if config.agents.sandbox_uids.is_some() {
        open_data_dir_to_sandbox_users(&config.node.data_dir)?;
    }
    let how = config.nats_connect(&format!("lineage-node-{node_id}"))?;
    let nats = lineage_bus::connect_with(&how).await?;
    tracing::info!(
        node = %node_id,
        cluster = %config.cluster,
        nats = %lineage_bus::redact_url(&config.nats_url),
        auth = %how.auth.describe(),
        tls = how.tls.required,
        raw_agent_commands = config.agents.allow_raw_commands,
        raft_links = match (&config.registry.role, &config.registry.direct) {
            (RegistryRole::Client, _) => "none (not a voter)",
            (RegistryRole::Voter, Some(_)) => "direct",
            (RegistryRole::Voter, None) => "nats",
        },
        "node starting"
    );
    if config.agents.allow_raw_commands {
        tracing::warn!("agents.allow_raw_commands = true: this node runs any agent command line a request names (development only)");
    }

    let registry_node = match config.registry.role {
        RegistryRole::Voter => {
            let mut cfg = RegistryNodeConfig::new(
                config.cluster.clone(),
                config.registry.raft_id,
                node_id.clone(),
                PathBuf::from(&config.node.data_dir).join("registry"),
            );
            cfg.heartbeat_interval = Duration::from_millis(config.registry.heartbeat_ms);
            cfg.election_timeout_min = Duration::from_millis(config.registry.election_min_ms);
            cfg.election_timeout_max = Duration::from_millis(config.registry.election_max_ms);
            if let Some(commands) = config.registry.snapshot_after_commands {
                cfg.snapshot_commands_since_last = commands;
            }
            if let Some(entries) = config.registry.log_kept_behind_snapshot {
                cfg.max_in_snapshot_log_to_keep = entries;
            }
            if let Some(direct) = &config.registry.direct {
                cfg.direct = Some(direct.links()?);
            }
            let member = RegistryNode::start(cfg, nats.clone())
                .await
                .map_err(|e| NodeError::Registry(e.to_string()))?;
            if config.registry.bootstrap {
                let initialized = member
                    .initialize(config.voter_map()?)
                    .await
                    .map_err(|e| NodeError::Registry(e.to_string()))?;
                tracing::info!(
                    initialized,
                    "registry bootstrap checked (a restarted node never re-initializes)"
                );
            }
            Some(member)
        }
        RegistryRole::Client => None,
    };
    // Writes go out under this node's identity (`registry.write.<node>`, Z2).
    let registry = RegistryClient::new(nats.clone(), config.cluster.clone()).as_node(&node_id);
    wait_for_registry(&registry, &shutdown).await?;

    let mut host_cfg = HostConfig::new(node_id.clone(), subjects.clone());
    host_cfg.lease = Duration::from_millis(config.lease.lease_ms);
    host_cfg.heartbeat_every = Duration::from_millis(config.lease.heartbeat_ms);
    host_cfg.takeover_after = (config.lease.takeover_after_ms > 0)
        .then(|| Duration::from_millis(config.lease.takeover_after_ms));
    host_cfg.disposed_after = (config.retention.disposed_after_ms > 0)
        .then(|| Duration::from_millis(config.retention.disposed_after_ms));
    host_cfg.request_results_kept = (config.retention.request_results_ms
        < lineage_registry::state::REQUEST_RETENTION_MS)
        .then(|| Duration::from_millis(config.retention.request_results_ms));
    host_cfg.max_depth = Some(config.limits.max_depth);
    host_cfg.fan_out = lineage_core::fanout::FanOut {
        max_children: config.limits.max_children,
        max_descendants: config.limits.max_descendants,
    };
    host_cfg.idle_root = config
        .limits
        .idle_root_ms
        .and_then(|ms| lineage_core::idle::IdleTtl::named("limits.idle_root_ms", ms).ok());
    host_cfg.streams = lineage_bus::StreamOptions {
        replicas: usize::from(config.nats.stream_replicas),
        update: config.nats.update_streams,
    };
    // T1: hosted agents reach their delegation tools through this socket (`lineage mcp`).
    // Without it (say the data_dir's path is too long for a Unix socket) the node runs, and a
    // profile with tools = true is refused with the reason.
    // C4: a root opened through an editor asks that editor's person (the front door).
    let drivers = NodeDrivers::new(PathBuf::from(&config.node.data_dir), config.agents.clone())
        .with_approvals(nats.clone(), subjects.clone());
    let sandbox_uids = config.agents.sandbox_uids.is_some();
    // Agents that declare `mcpCapabilities.http` get the loopback listener of `[tools]` instead.
    let (drivers, _tools_serving, _tools_http) = match ToolsSocket::bind(
        &PathBuf::from(&config.node.data_dir).join("tools"),
    ) {
        Ok((mut socket, serving)) => {
            if sandbox_uids {
                socket
                    .open_to_other_users()
                    .map_err(|e| NodeError::Config(e.to_string()))?;
            }
            let http = match config.tools.listen() {
                None => None,
                Some(Ok(addr)) => match socket.serve_http(addr) {
                    Ok(task) => {
                        tracing::info!(
                            url = socket.http_url().unwrap_or_default(),
                            "tools served over HTTP too"
                        );
                        Some(AbortOnDrop(task))
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "no tools over HTTP: every agent gets the stdio bridge");
                        None
                    }
                },
                Some(Err(e)) => {
                    return Err(NodeError::Config(format!(
                        "invalid config key tools.http_addr: {e}"
                    )))
                }
            };
            (
                drivers.with_tools(socket, tools_bridge()),
                Some(AbortOnDrop(serving)),
                http,
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "no tools socket: profiles with tools = true cannot run on this node");
            (drivers, None, None)
        }
    };
    // The host's own token: a signal does not cut its turns short; the graceful shutdown
    // below winds it down first, then cancels it (`Host::shutdown`).
    let host = Host::start(
        host_cfg,
        HostDeps::nats(
            nats.clone(),
            Arc::new(registry.clone()),
            Arc::new(SystemClock),
            Arc::new({
                // V2: a sandbox ready ahead for each sandboxed profile's next spawn.
                drivers.start_warming();
                drivers
            }),
        ),
        CancellationToken::new(),
    )
    .await
    .map_err(|e| NodeError::Host(e.to_string()))?;
    let service = lineage_host::service::serve(host.clone())
        .await
        .map_err(|e| NodeError::Host(e.to_string()))?;

    let probe = Arc::new(NodeProbe {
        nats: nats.clone(),
        registry: registry.clone(),
        host: host.clone(),
        member: registry_node.as_ref().map(|m| m.raft().clone()),
        store: registry_node.as_ref().map(|m| m.store_stats()),
    });
    if !config.node.http_addr.is_empty() {
        let addr = http::serve(&config.node.http_addr, probe, shutdown.clone()).await?;
        tracing::info!(%addr, "http: /metrics /healthz /readyz");
    }
    tracing::info!(node = %node_id, "node ready");
    // Take back what the registry still places here (a restart): in the background, once the
    // node serves requests.
    let readopting = host.clone();
    tokio::spawn(async move {
        match readopting.readopt().await {
            Ok(report) if report.resumed.is_empty() && report.failed.is_empty() => {}
            Ok(report) => tracing::info!(
                resumed = report.resumed.len(),
                failed = report.failed.len(),
                "re-adopted the sessions placed on this node"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "re-adoption failed; the sessions come back on their next followup")
            }
        }
    });

    shutdown.cancelled().await;
    let grace = Duration::from_millis(config.shutdown.grace_ms);
    tracing::info!(node = %node_id, grace_ms = config.shutdown.grace_ms, "node stopping: no new work, running turns may finish");
    // Each step is bounded: with NATS gone (say the server died first), a flush or an
    // unsubscribe can wait for a reconnect that never comes, and a node must still exit.
    let step = Duration::from_secs(5);
    if tokio::time::timeout(step, service.leave_group())
        .await
        .is_err()
    {
        tracing::warn!("could not leave the service's queue group within 5 s; winding down anyway");
    }
    // The grace, then the hand-off (releases and resumes elsewhere: bounded by a step more).
    if tokio::time::timeout(grace + step + step, host.wind_down(grace))
        .await
        .is_err()
    {
        tracing::warn!(
            "the hand-off did not finish in time; stopping what still runs (it stays resumable)"
        );
    }
    if tokio::time::timeout(step, service.stop()).await.is_err() {
        tracing::warn!("service did not stop within 5 s; exiting anyway");
    }
    if tokio::time::timeout(step, host.shutdown()).await.is_err() {
        tracing::warn!("agents did not stop within 5 s; exiting anyway (they stay resumable)");
    }
    if let Some(member) = registry_node {
        // Two steps: a leader first hands leadership over (bounded by twice the election
        // timeout), then stops.
        match tokio::time::timeout(step * 2, member.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "registry member did not shut down cleanly"),
            Err(_) => tracing::warn!("registry member did not stop within 10 s; exiting anyway"),
        }
    }
    let _ = tokio::time::timeout(step, nats.flush()).await;
    Ok(())
}

/// Waits until the registry answers a linearizable read (a leader exists), or shutdown.
async fn wait_for_registry(
    registry: &RegistryClient,
    shutdown: &CancellationToken,
) -> Result<(), NodeError> {
    let mut last = String::new();
    for attempt in 0..600u32 {
        if shutdown.is_cancelled() {
            return Err(NodeError::Registry(
                "shutdown before the registry was reachable".into(),
            ));
        }
        match registry.status(Consistency::Linearizable).await {
            Ok(status) if status.leader.is_some() => return Ok(()),
            Ok(_) => last = "no leader yet".into(),
            Err(e) => last = e.to_string(),
        }
        if attempt % 20 == 19 {
            tracing::info!(reason = %last, "waiting for the registry");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(NodeError::Registry(format!(
        "registry unreachable for 60 s ({last}); start the voters listed in registry.voters"
    )))
}

struct NodeProbe {
    nats: async_nats::Client,
    registry: RegistryClient,
    host: Host,
    member: Option<lineage_registry::raft_types::RegistryRaft>,
    store: Option<std::sync::Arc<lineage_registry::store_stats::StoreStats>>,
}

impl Probe for NodeProbe {
    fn metrics(&self) -> Pin<Box<dyn Future<Output = String> + Send + '_>> {
        Box::pin(async move {
            let status = self.host.status();
            let sessions = match tokio::time::timeout(
                Duration::from_secs(2),
                self.registry.session_counts(Consistency::Stale),
            )
            .await
            {
                Ok(Ok(counts)) => Some(counts),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "metrics: no session counts from the registry");
                    None
                }
                Err(_) => None,
            };
            MetricsPage {
                node: status.node.to_string(),
                live_agents: status.live.len(),
                in_turn: status.live.iter().filter(|a| a.in_turn).count(),
                nats: crate::metrics::NatsView {
                    connected: self.nats.connection_state()
                        == async_nats::connection::State::Connected,
                    connects: self
                        .nats
                        .statistics()
                        .connects
                        .load(std::sync::atomic::Ordering::Relaxed),
                },
                host: self.host.metrics().snapshot(),
                context_tokens: self.host.context_tokens(),
                process: crate::process::ProcessFigures::read(),
                sessions,
                raft: self
                    .member
                    .as_ref()
                    .map(|raft| RaftView::from_metrics(&raft_types::current_metrics(raft))),
                store: self.store.as_ref().map(|s| s.figures()),
                otlp: crate::otlp::global_stats(),
            }
            .render()
        })
    }

    fn ready(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            if self.nats.connection_state() != async_nats::connection::State::Connected {
                return Err("NATS is not connected".into());
            }
            // Within 1 s, inside the chart's probe timeout (2 s): a registry that does not
            // answer by then is not ready (issue 37).
            match tokio::time::timeout(
                READY_WITHIN,
                self.registry.status(Consistency::Linearizable),
            )
            .await
            {
                Ok(Ok(s)) if s.leader.is_some() => Ok(()),
                Ok(Ok(_)) => Err("registry has no leader".into()),
                Ok(Err(e)) => Err(format!("registry unreachable: {e}")),
                Err(_) => Err(format!("registry did not answer within {READY_WITHIN:?}")),
            }
        })
    }
}

/// How long `/readyz` waits for the registry: under the chart's readiness probe timeout.
const READY_WITHIN: Duration = Duration::from_millis(900);

/// The bridge a hosted agent starts as its MCP server: this binary's `mcp` verb.
fn tools_bridge() -> Vec<String> {
    let program = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "lineage".to_owned());
    vec![program, "mcp".to_owned()]
}

/// Stops the tools socket's accept loop with the node.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// V2: whether this node can make sandboxes, checked once before anything starts. A profile
/// that asks for one on a node that cannot refuses the start; `auto` profiles run without one,
/// said here.
fn resolve_isolation(config: &mut NodeConfig) -> Result<(), NodeError> {
    let agents = &mut config.agents;
    let runs_processes = agents.allow_raw_commands
        || agents
            .profiles
            .values()
            .any(|p| p.driver == lineage_drivers::profiles::ProfileDriver::Acp);
    if !runs_processes {
        return Ok(());
    }
    let support = lineage_drivers::sandbox::probe(std::env::var("PATH").ok().as_deref());
    let euid = lineage_drivers::sandbox::effective_uid();
    let said = agents
        .resolve_isolation(&support, euid)
        .map_err(|(key, why)| NodeError::Config(format!("invalid config key {key}: {why}")))?;
    if agents.bwrap.is_some() {
        tracing::info!(bwrap = ?agents.bwrap, uids = ?agents.sandbox_uids.map(String::from), "agents run in sandboxes of their own unless their profile says isolation = \"none\"");
    }
    for line in said {
        tracing::warn!("{line}");
    }
    Ok(())
}

/// V2, a root node with `agents.sandbox_uids`: the sandboxes' users must reach their working
/// directories (under `data_dir/work`, searchable but not listable by others) and the tools
/// socket, and every directory above the data directory must let them through.
fn open_data_dir_to_sandbox_users(data_dir: &std::path::Path) -> Result<(), NodeError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(blocked) = data_dir
        .parent()
        .and_then(lineage_drivers::sandbox::unsearchable_above)
    {
        return Err(NodeError::Config(format!(
            "invalid config key agents.sandbox_uids: the sandboxes' users cannot reach node.data_dir {} through {} (no search permission for others); chmod o+x it, or move the data_dir",
            data_dir.display(),
            blocked.display()
        )));
    }
    let work = data_dir.join("work");
    let opened = std::fs::create_dir_all(&work).and_then(|()| {
        for dir in [data_dir, work.as_path()] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
        }
        Ok(())
    });
    opened.map_err(|source| NodeError::Io {
        what: format!(
            "cannot make {} searchable for the sandboxes' users",
            work.display()
        ),
        source,
    })
}
