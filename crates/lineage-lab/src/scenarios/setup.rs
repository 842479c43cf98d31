//! A scenario's environment ([`Bench`]): the cluster it runs on (its own, started in a temp
//! dir, or one given with `--nats`), the nodes it uses, and the baseline measured on its server.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use lineage::dev::DevCluster;
use lineage::global::Global;
use lineage_bus::control::ControlError;
use lineage_bus::ControlClient;
use lineage_core::ids::{NodeId, SessionId};
use lineage_registry::{Consistency, RegistryClient};

use super::{connect, internal, scaled, unavailable, Ctl};
use crate::bench::{nats_round_trips, report, Samples};

/// One scenario's environment: the cluster (own or given), the baseline measured on its server.
pub(super) struct Bench {
    pub(super) ctl: Ctl,
    pub(super) registry: RegistryClient,
    /// The cluster's name (`--cluster`).
    pub(super) cluster_name: String,
    /// Three nodes (repeated when the given cluster has fewer live ones).
    pub(super) nodes: Vec<NodeId>,
    baseline: Samples,
    /// A directory on the disk the registry writes to (own cluster), else a temp dir.
    pub(super) scratch: PathBuf,
    /// Whether the cluster is the bench's own (dropped afterwards) or a given one.
    pub(super) external: bool,
    /// Top-level sessions created in a given cluster, drained at the end.
    roots: Mutex<Vec<SessionId>>,
    /// The bench's own cluster (its nats-server is restarted by the sync phase of `spawn`).
    pub(super) cluster: tokio::sync::Mutex<Option<DevCluster>>,
    _server: Option<lineage_testkit::NatsServer>,
    _scratch: Option<tempfile::TempDir>,
}

impl Bench {
    pub(super) async fn setup(g: &Global, with_nodes: bool) -> Result<Bench, ControlError> {
        let cluster_name = lineage::global::cluster(g);
        let subjects = lineage::global::subjects(g)?;
        let temp = || {
            tempfile::Builder::new()
                .prefix("lineage-bench-")
                .tempdir()
                .map_err(|e| internal(format!("cannot create a temp dir: {e}")))
        };
        let (client, cluster, server, scratch, scratch_dir) = if let Some(url) = &g.nats {
            let client = connect(url).await?;
            let t = temp()?;
            (client, None, None, t.path().to_path_buf(), Some(t))
        } else if with_nodes {
            let build = if cfg!(debug_assertions) {
                "a debug build: figures are not comparable with a release build's"
            } else {
                "a release build"
            };
            let program = lineage::dev::lineage_program()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "lineage".to_owned());
            println!("starting nats-server and 3 lineage nodes ({program}, {build}) ...");
            let cluster = DevCluster::start(
                3,
                None,
                None,
                &cluster_name,
                lineage::dev::RaftLinks::Direct,
            )
            .await?;
            let client = connect(&cluster.nats.url()).await?;
            let dir = cluster.dir.clone();
            (client, Some(cluster), None, dir, None)
        } else {
            let server = lineage_testkit::NatsServer::start()
                .map_err(|e| unavailable("cannot start nats-server", e))?;
            let client = connect(&server.url()).await?;
            let t = temp()?;
            (client, None, Some(server), t.path().to_path_buf(), Some(t))
        };
        let info = client.server_info();
        println!(
            "server: nats-server {} ({}), cluster {cluster_name}{}",
            info.version,
            if g.nats.is_some() {
                "given with --nats"
            } else {
                "started for this scenario"
            },
            cluster
                .as_ref()
                .map(|c| format!(", data and logs in {}", c.dir.display()))
                .unwrap_or_default()
        );
        let sync = cluster
            .as_ref()
            .map(|c| c.nats.options().sync_interval.clone())
            .or_else(|| server.as_ref().map(|s| s.options().sync_interval.clone()));
        println!("{}", sync_statement(sync.as_deref()));
        let registry = RegistryClient::new(client.clone(), cluster_name.clone());
        let nodes = if !with_nodes {
            Vec::new()
        } else if let Some(c) = &cluster {
            c.nodes
                .iter()
                .map(|n| NodeId::parse(&n.id).map_err(|e| internal(e.to_string())))
                .collect::<Result<_, _>>()?
        } else {
            let now = lineage::client::now_ms();
            let mut live: Vec<NodeId> = registry
                .nodes(Consistency::Linearizable)
                .await
                .map_err(|e| unavailable("cannot list the cluster's nodes", e))?
                .into_iter()
                .filter(|n| n.lease_expires_at_ms > now)
                .map(|n| n.node)
                .collect();
            live.sort();
            if live.is_empty() {
                return Err(unavailable(
                    "no live node in the given cluster",
                    "start nodes first (lineage dev)",
                ));
            }
            let all: Vec<NodeId> = (0..3).map(|i| live[i % live.len()].clone()).collect();
            all
        };
        if !nodes.is_empty() {
            let names: Vec<&str> = nodes.iter().map(|n| n.as_str()).collect();
            println!("nodes: {}", names.join(", "));
        }
        // The baseline, on the same server, after a warm-up.
        nats_round_trips(&client, 100).await?;
        let baseline = nats_round_trips(&client, scaled(2000)).await?;
        report("nats request-reply (baseline)", &baseline, &baseline);
        Ok(Bench {
            ctl: Ctl {
                control: ControlClient::new(
                    client.clone(),
                    subjects.clone(),
                    Duration::from_millis(g.timeout_ms.max(30_000)),
                ),
                client,
                subjects,
            },
            registry,
            cluster_name: cluster_name.clone(),
            nodes,
            baseline,
            scratch,
            external: g.nats.is_some(),
            roots: Mutex::new(Vec::new()),
            cluster: tokio::sync::Mutex::new(cluster),
            _server: server,
            _scratch: scratch_dir,
        })
    }

    pub(super) fn node(&self, i: usize) -> &NodeId {
        &self.nodes[i % self.nodes.len()]
    }

    /// A top-level session on `node`, remembered for cleanup in a given cluster.
    pub(super) async fn root(&self, node: &NodeId) -> Result<SessionId, ControlError> {
        let root = self.ctl.root(node).await?;
        if let Ok(mut roots) = self.roots.lock() {
            roots.push(root.clone());
        }
        Ok(root)
    }

    pub(super) fn report(&self, name: &str, s: &Samples) {
        report(name, s, &self.baseline);
    }

    /// In a given cluster, drains what the scenario created (best effort).
    pub(super) async fn cleanup(&self) {
        let roots = self.roots.lock().map(|r| r.clone()).unwrap_or_default();
        if !self.external || roots.is_empty() {
            return;
        }
        let outcome = self
            .ctl
            .control
            .with_timeout(Duration::from_secs(120))
            .drain(roots)
            .await;
        if let Err(e) = outcome {
            println!("warning: cannot drain the sessions this scenario created: {e}");
        }
    }
}

/// What the bench says about the JetStream sync it runs with (`None`: a server it did not
/// start, whose config it cannot read).
fn sync_statement(sync: Option<&str>) -> String {
    match sync {
        Some("always") => "JetStream sync_interval: always (every stream write is fsync'd before its ack)".to_owned(),
        Some(other) => format!("JetStream sync_interval: {other} (acknowledged stream writes are fsync'd at most every {other})"),
        None => "JetStream sync_interval: not known (a server given with --nats: see its config; lineage's shipped config sets always)".to_owned(),
    }
}
