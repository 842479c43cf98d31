//! [`NatsCluster`]: three real nats-servers on loopback, routed into one JetStream cluster.
//!
//! Each server is a [`NatsServer`] (config file, `sync_interval` from [`NatsOptions`], its own
//! temp store) whose extra config adds a monitoring port and a `cluster { name, listen, routes }`
//! block naming the other two. [`NatsCluster::start`] returns once every server answers 200 on
//! `/healthz` and agrees on a JetStream meta leader, so a replicated stream can be created
//! right away. [`NatsCluster::kill`] SIGKILLs one server (by pid); [`NatsCluster::restart`]
//! starts it again on the same ports with the same name and store and waits until it rejoined.

use std::io;
use std::time::{Duration, Instant};

use crate::{free_port, http_get, NatsOptions, NatsServer};

/// How many servers a [`NatsCluster`] has.
pub const SIZE: usize = 3;

/// How many times [`NatsCluster::start`] picks new ports when a server cannot bind its own.
const START_ATTEMPTS: usize = 3;

/// How long [`NatsCluster::start`] and [`NatsCluster::restart`] wait for JetStream to be ready.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// The ports of one member.
#[derive(Debug, Clone, Copy)]
struct Ports {
    client: u16,
    route: u16,
    monitor: u16,
}

/// Three nats-servers with routes between them and clustered JetStream. Dropping it kills
/// every server (by pid) and removes their stores.
pub struct NatsCluster {
    servers: Vec<NatsServer>,
    ports: Vec<Ports>,
    /// Which servers [`NatsCluster::kill`] stopped (and no restart started again).
    down: Vec<bool>,
}

impl NatsCluster {
    /// Starts the cluster with [`NatsOptions::default`] (`sync_interval: always`).
    pub fn start() -> io::Result<Self> {
        Self::start_with(NatsOptions::default())
    }

    /// Starts the cluster; `options.extra_config` goes into every server's config (after the
    /// monitoring port and the cluster block), `options.sync_interval` is every server's.
    pub fn start_with(options: NatsOptions) -> io::Result<Self> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(&options) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the NATS cluster did not start")))
    }

    fn try_start(options: &NatsOptions) -> io::Result<Self> {
        let mut ports = Vec::with_capacity(SIZE);
        let mut taken = std::collections::HashSet::new();
        while ports.len() < SIZE {
            let mut pick = || -> io::Result<u16> {
                loop {
                    let p = free_port()?;
                    if taken.insert(p) {
                        return Ok(p);
                    }
                }
            };
            ports.push(Ports {
                client: pick()?,
                route: pick()?,
                monitor: pick()?,
            });
        }
        let cluster_name = format!("lineage-test-{}-{}", std::process::id(), ports[0].route);
        let mut servers = Vec::with_capacity(SIZE);
        for (i, own) in ports.iter().enumerate() {
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| format!("\"nats-route://127.0.0.1:{}\"", p.route))
                .collect();
            let extra = format!(
                "http: \"127.0.0.1:{monitor}\"\ncluster {{\n  name: \"{cluster_name}\"\n  listen: \"127.0.0.1:{route}\"\n  routes: [{routes}]\n}}\n{user}",
                monitor = own.monitor,
                route = own.route,
                routes = routes.join(", "),
                user = options.extra_config,
            );
            let store = tempfile::Builder::new()
                .prefix(&format!("lineage-nats-cluster-{i}-"))
                .tempdir()?;
            // A server that cannot bind drops the ones already started (by pid) with `servers`.
            servers.push(NatsServer::start_on_with(
                own.client,
                store,
                NatsOptions {
                    extra_config: extra,
                    sync_interval: options.sync_interval.clone(),
                },
            )?);
        }
        let mut cluster = NatsCluster {
            servers,
            ports,
            down: vec![false; SIZE],
        };
        cluster.wait_ready(READY_WITHIN)?;
        Ok(cluster)
    }

    /// How many servers (always [`SIZE`]).
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Server `i`'s client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self, i: usize) -> String {
        self.servers[i].url()
    }

    /// Every server's client URL, comma-joined (the form NATS clients take for a list).
    pub fn urls(&self) -> String {
        self.url_list().join(",")
    }

    /// Every server's client URL.
    pub fn url_list(&self) -> Vec<String> {
        self.servers.iter().map(NatsServer::url).collect()
    }

    /// The client URL of the first server not stopped by [`NatsCluster::kill`] (for a client
    /// that takes one URL).
    pub fn live_url(&self) -> String {
        (0..self.len())
            .find(|&i| !self.down[i])
            .map(|i| self.url(i))
            .unwrap_or_else(|| self.url(0))
    }

    /// True when server `i` was stopped by [`NatsCluster::kill`] and not restarted since.
    pub fn is_down(&self, i: usize) -> bool {
        self.down[i]
    }

    /// Server `i`.
    pub fn server(&self, i: usize) -> &NatsServer {
        &self.servers[i]
    }

    /// Server `i`'s monitoring port (`/healthz`, `/jsz`, `/routez`).
    pub fn monitor_port(&self, i: usize) -> u16 {
        self.ports[i].monitor
    }

    /// Server `i`'s route (cluster) port.
    pub fn route_port(&self, i: usize) -> u16 {
        self.ports[i].route
    }

    /// True while server `i`'s process runs.
    pub fn is_running(&mut self, i: usize) -> bool {
        self.servers[i].is_running()
    }

    /// SIGKILLs server `i` (by pid) and waits for it to exit; its ports and store are kept.
    pub fn kill(&mut self, i: usize) {
        self.servers[i].kill();
        self.down[i] = true;
    }

    /// Starts server `i` again (killing it first if it runs) on the same ports with the same
    /// name and store, and waits until every running server is healthy again (it rejoined
    /// the routes and JetStream, and caught up).
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.servers[i].restart()?;
        self.down[i] = false;
        self.wait_ready(READY_WITHIN)
    }

    /// Server `i`'s `/healthz`: status code and body (200 once its JetStream is current with
    /// the meta leader and its streams and consumers caught up).
    pub fn healthz(&self, i: usize) -> io::Result<(u16, String)> {
        http_get(self.ports[i].monitor, "/healthz")
    }

    /// Server `i`'s `/jsz` as JSON (`meta_cluster.leader`, stream and consumer counts, ...).
    pub fn jsz(&self, i: usize) -> io::Result<serde_json::Value> {
        let (code, body) = http_get(self.ports[i].monitor, "/jsz")?;
        if code != 200 {
            return Err(io::Error::other(format!("/jsz answered {code}: {body}")));
        }
        serde_json::from_str(&body).map_err(|e| io::Error::other(format!("/jsz: {e}")))
    }

    /// The JetStream meta leader's server name as server `i` sees it (`None`: it knows none).
    pub fn meta_leader(&self, i: usize) -> Option<String> {
        let jsz = self.jsz(i).ok()?;
        let leader = jsz.get("meta_cluster")?.get("leader")?.as_str()?;
        (!leader.is_empty()).then(|| leader.to_owned())
    }

    /// Waits until every running server answers 200 on `/healthz` and all of them name the
    /// same JetStream meta leader, one of the running servers.
    pub fn wait_ready(&mut self, limit: Duration) -> io::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let running: Vec<usize> = (0..self.len()).filter(|&i| self.is_running(i)).collect();
            let healthy = !running.is_empty()
                && running
                    .iter()
                    .all(|&i| matches!(self.healthz(i), Ok((200, _))));
            let leaders: Vec<Option<String>> =
                running.iter().map(|&i| self.meta_leader(i)).collect();
            let names: Vec<&str> = running.iter().map(|&i| self.servers[i].name()).collect();
            let agreed = match leaders.first() {
                Some(Some(first)) => {
                    leaders.iter().all(|l| l.as_ref() == Some(first))
                        && names.contains(&first.as_str())
                }
                _ => false,
            };
            if healthy && agreed {
                return Ok(());
            }
            if Instant::now() > deadline {
                let report: Vec<String> = (0..self.len())
                    .map(|i| {
                        format!(
                            "{}: healthz {:?}, meta leader {:?}",
                            self.url(i),
                            self.healthz(i).map(|(c, b)| format!("{c} {}", b.trim())),
                            self.meta_leader(i)
                        )
                    })
                    .collect();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the NATS cluster was not ready within {limit:?}: {}",
                        report.join("; ")
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
