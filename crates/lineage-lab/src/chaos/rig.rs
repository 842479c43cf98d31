//! The cluster a chaos run breaks: a 3-server NATS cluster (clustered JetStream, R3 streams),
//! three registry voters (node-1..3) and two workers (node-4, node-5; `limits.max_depth` 4),
//! every node reaching NATS
//! only through proxies of its own (toxiproxy, one per NATS server) so a run can slow, slice,
//! limit, blackhole, reset or cut one node's link.

use std::collections::BTreeMap;
use std::time::Duration;

use lineage_testkit::cluster::{ClusterOptions, Nats};
use lineage_testkit::toxiproxy::Toxiproxy;
use lineage_testkit::{Cluster, NatsCluster};

/// Every node's id, node-1 first.
pub const NODES: [&str; 5] = ["node-1", "node-2", "node-3", "node-4", "node-5"];
/// The registry voters' indexes.
pub const VOTERS: usize = 3;

/// The running cluster and the proxies in front of NATS.
pub struct Rig {
    /// nats-servers and node processes.
    pub cluster: Cluster,
    /// The proxies; node `i`'s to server `k` is named by [`proxy_name`].
    pub proxy: Toxiproxy,
}

/// The proxy node `node` (0-based) reaches NATS server `server` (0-based) through.
pub fn proxy_name(node: usize, server: usize) -> String {
    format!("node-{}-nats-{}", node + 1, server + 1)
}

impl Rig {
    /// Starts NATS, the proxies, the voters and the workers, and waits until every node is
    /// ready. Errors say what is missing (toxiproxy-server, nats-server).
    pub fn start(toxiproxy_bin: &std::path::Path) -> Result<Rig, String> {
        let nats = NatsCluster::start()
            .map_err(|e| format!("cannot start a 3-server NATS cluster: {e}"))?;
        let proxy = Toxiproxy::start(toxiproxy_bin);
        let mut routes = BTreeMap::new();
        for node in 0..NODES.len() {
            // Its own server first, as the cluster fixture orders them.
            let urls: Vec<String> = (0..nats.len())
                .map(|k| (node + k) % nats.len())
                .map(|server| {
                    let upstream = nats.url(server).trim_start_matches("nats://").to_owned();
                    let listen = proxy.proxy_to(&proxy_name(node, server), &upstream);
                    format!("nats://127.0.0.1:{listen}")
                })
                .collect();
            routes.insert(node, urls.join(","));
        }
        let env: Vec<(String, String)> = vec![
            ("LINEAGE_NATS__STREAM_REPLICAS".into(), "3".into()),
            (
                "LINEAGE_LIMITS__MAX_DEPTH".into(),
                super::trees::MAX_DEPTH.to_string(),
            ),
        ];
        let options = ClusterOptions {
            env: env.clone(),
            ..Default::default()
        };
        let mut cluster = Cluster::start_on(Nats::Three(nats), VOTERS, options, routes);
        // The workers get the same settings (a root born on a worker records its max depth).
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for id in &NODES[VOTERS..] {
            cluster.add_client_node(id, &env);
        }
        cluster.wait_ready(Duration::from_secs(60));
        Ok(Rig { cluster, proxy })
    }

    /// The registry leader's node index (0-based), as `status` names it; `None` when no node
    /// names one within `within`.
    pub fn leader(&self, within: Duration) -> Option<usize> {
        let began = std::time::Instant::now();
        loop {
            let (_, out, _) = self.cluster.cli(&["--json", "status"]);
            let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
            if let Some(id) = status["registry"]["leader"].as_u64() {
                return Some((id as usize).saturating_sub(1));
            }
            if began.elapsed() > within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// True when every node answers 200 on `/readyz`.
    pub fn all_ready(&self) -> bool {
        self.cluster
            .nodes
            .iter()
            .all(|n| matches!(n.http_get("/readyz"), Some((200, _))))
    }
}
