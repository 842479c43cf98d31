//! [`Host`]: the live agents of one node, and the node lease.
//!
//! The node process builds one [`Host`] with [`Host::start`] from a [`HostConfig`] (node id,
//! cluster, lease), a [`HostDeps`] (the bus ports and the NATS control transport, [`RegistryPort`](crate::registry::RegistryPort),
//! [`Clock`], [`DriverFactory`])
//! and a shutdown [`CancellationToken`]. Each live agent is a tokio task ([`crate::agent`]) with
//! its driver, its activation, its runtime owner and a durable inbox consumer. The lifecycle
//! operations live one per file: [`crate::spawn`], [`crate::settle`], [`crate::report`],
//! [`crate::followup`], [`crate::interrupt`], [`crate::resume`], [`crate::drain`].

use std::sync::Arc;

use lineage_bus::ports::BusPorts;
use lineage_bus::Subjects;
use lineage_core::ids::{NodeId, SessionId};
use tokio_util::sync::CancellationToken;

use crate::clock::IdMint;
use crate::control::{LiveAgent, StatusReply};
use crate::error::HostError;
use crate::lifetime::Lifetime;
use crate::live::Live;
use crate::shared::Shared;
use crate::telemetry::HostMetrics;

pub use crate::config::{HostConfig, HostDeps};
pub use lineage_drivers::driver::{provider_of, DriverFactory, ScriptDrivers, ACP_PROVIDER};

/// The live agents of one node. Cheap to clone (all clones are the same host).
#[derive(Clone)]
pub struct Host {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("node", &self.shared.cfg.node)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// Opens the bus ports (on NATS: the inbox and event streams), writes the first heartbeat, and starts the heartbeat
    /// task. Everything stops when `shutdown` is cancelled (or [`Host::shutdown`] is called):
    /// live agents stop without settling, their registry records stay, and any node can
    /// cold-resume them once this node's lease expires (or this node comes back).
    pub async fn start(
        config: HostConfig,
        deps: HostDeps,
        shutdown: CancellationToken,
    ) -> Result<Host, HostError> {
        let ports = match (deps.ports, &deps.nats) {
            (Some(ports), _) => ports,
            (None, Some(nats)) => {
                BusPorts::nats(nats.clone(), config.subjects.clone(), config.streams).await?
            }
            (None, None) => {
                return Err(HostError::Internal(
                    "a host needs NATS or bus ports (HostDeps::nats or HostDeps::with_ports)"
                        .to_owned(),
                ))
            }
        };
        let node = config.node.clone();
        let metrics = Arc::new(HostMetrics::default());
        let registry = Arc::new(crate::timed_registry::TimedRegistry {
            inner: deps.registry,
            metrics: metrics.clone(),
            clock: deps.clock.clone(),
        });
        let shared = Arc::new(Shared {
            mint: IdMint::new(deps.clock.clone()),
            cfg: config,
            bus: ports,
            registry,
            clock: deps.clock,
            drivers: deps.drivers,
            live: Live::new(node.clone()),
            lifetime: Lifetime::new(node, shutdown),
            lease: crate::lease::LeaseMarks::default(),
            metrics,
            results_swept_at_ms: std::sync::atomic::AtomicU64::new(0),
            just_packed: Default::default(),
        });
        crate::sweeps::start(&shared).await?;
        Ok(Host { shared })
    }

    /// This node.
    pub fn node(&self) -> &NodeId {
        &self.shared.cfg.node
    }

    /// The cluster's subjects.
    pub fn subjects(&self) -> &Subjects {
        &self.shared.cfg.subjects
    }

    /// The shutdown signal this host obeys.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shared.lifetime.shutdown.clone()
    }

    /// This host's counters (spawns, settlements, resumes, reports, inbox, drains).
    pub fn metrics(&self) -> &HostMetrics {
        &self.shared.metrics
    }

    /// True when `session` is live on this node.
    pub fn is_live(&self, session: &SessionId) -> bool {
        self.shared.live.is_live(session)
    }

    /// The agent profiles this node offers (T4).
    pub fn agents(&self) -> crate::control::AgentsReply {
        let mut offer = self.shared.drivers.offer();
        offer.node = Some(self.shared.cfg.node.clone());
        offer
    }

    /// Tokens in the context of the agents live here, as they last reported, summed.
    pub fn context_tokens(&self) -> u64 {
        self.shared
            .live
            .agents
            .lock()
            .map(|agents| {
                agents
                    .values()
                    .map(|h| h.context_tokens.load(std::sync::atomic::Ordering::Relaxed))
                    .fold(0u64, u64::saturating_add)
            })
            .unwrap_or(0)
    }

    /// What this node hosts now.
    pub fn status(&self) -> StatusReply {
        let mut live: Vec<LiveAgent> = self
            .shared
            .live
            .agents
            .lock()
            .map(|agents| {
                agents
                    .iter()
                    .map(|(id, h)| LiveAgent {
                        session: id.clone(),
                        parent: h.header.parent_session().cloned(),
                        owner: h.owner.clone(),
                        shape: h.shape,
                        depth: h.header.delegation_depth().unwrap_or(0),
                        in_turn: h.turn.lock().map(|t| t.is_some()).unwrap_or(false),
                    })
                    .collect()
            })
            .unwrap_or_default();
        live.sort_by(|a, b| a.session.cmp(&b.session));
        StatusReply {
            node: self.shared.cfg.node.clone(),
            cluster: self.shared.cfg.subjects.cluster().to_owned(),
            live,
        }
    }

    /// Stops every agent task and the heartbeat, and waits for them (no settlement, no
    /// registry change: the sessions stay resumable).
    pub async fn shutdown(&self) {
        self.shared.lifetime.shutdown.cancel();
        let tasks: Vec<_> = self
            .shared
            .lifetime
            .tasks
            .lock()
            .map(|mut t| t.drain(..).collect())
            .unwrap_or_default();
        for task in tasks {
            let _ = task.await;
        }
        if let Ok(mut agents) = self.shared.live.agents.lock() {
            agents.clear();
        }
    }
}
