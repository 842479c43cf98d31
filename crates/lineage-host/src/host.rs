//! [`Host`]: the live agents of one node, and the node lease.
//!
//! The node process builds one [`Host`] with [`Host::start`] from a [`HostConfig`] (node id,
//! cluster, lease), a [`HostDeps`] (the bus ports and the NATS control transport, [`RegistryPort`],
//! [`Clock`], [`DriverFactory`])
//! and a shutdown [`CancellationToken`]. Each live agent is a tokio task ([`crate::agent`]) with
//! its driver, its activation, its runtime owner and a durable inbox consumer. The lifecycle
//! operations live one per file: [`crate::spawn`], [`crate::settle`], [`crate::report`],
//! [`crate::followup`], [`crate::interrupt`], [`crate::resume`], [`crate::drain`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lineage_bus::ports::{BusPorts, ControlTransport, EventLog, Inbox, Lifecycle};
use lineage_bus::Subjects;
use lineage_core::authority::LocalAncestry;
use lineage_core::depth::MaxDepth;
use lineage_core::descriptor::SubagentShape;
use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, SessionId};
use lineage_registry::types::{Command, SessionState};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::agent::AgentCmd;
use crate::clock::{Clock, IdMint};
use crate::control::{LiveAgent, StatusReply};
use crate::error::HostError;
use crate::registry::RegistryPort;
use crate::telemetry::HostMetrics;

pub use lineage_drivers::driver::{provider_of, DriverFactory, ScriptDrivers, ACP_PROVIDER};

/// Static settings of a host.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// This node.
    pub node: NodeId,
    /// The cluster's subjects.
    pub subjects: Subjects,
    /// Lease length written with each heartbeat.
    pub lease: Duration,
    /// How often to heartbeat (well under `lease`).
    pub heartbeat_every: Duration,
    /// The default max depth (D4) when a request gives none.
    pub max_depth: Option<MaxDepth>,
    /// The fan-out caps (Q1) this node asks for at every birth (`limits.max_children`,
    /// `limits.max_descendants`); the registry applies the stricter of these and the tree's.
    pub fan_out: lineage_core::fanout::FanOut,
    /// Deadline of a request to another node (start of a continuable child, release, ...).
    pub request_timeout: Duration,
    /// Deadline of a one-shot run started on another node.
    pub one_shot_timeout: Duration,
    /// How many times a registry write is tried before giving up (settlement commit).
    pub registry_attempts: u32,
    /// Takeover: how long past a dead node's lease expiry its `running`/`waiting` sessions are
    /// resumed elsewhere without waiting for a followup (see [`crate::readopt`]); `None`: never.
    pub takeover_after: Option<Duration>,
    /// Replicas of the events and inbox streams, and whether an existing stream with fewer is
    /// updated (`nats.stream_replicas`, `nats.update_streams`; Z3).
    pub streams: lineage_bus::StreamOptions,
    /// Q5: how long a disposed session's record, log and inbox are kept before the sweeper
    /// purges them (`retention.disposed_after_ms`); `None`: kept for ever.
    pub disposed_after: Option<Duration>,
    /// Q5, G2: how long the registry keeps an accepted command's result for retries by its
    /// request id (`retention.request_results_ms`); `None`: the registry's built-in window
    /// (`lineage_registry::state::REQUEST_RETENTION_MS`, a day).
    pub request_results_kept: Option<Duration>,
}

impl HostConfig {
    /// Defaults: 10 s lease, heartbeat every 2 s, no max depth, 10 s requests, 5 min one-shots,
    /// one-replica streams, disposed sessions kept for a day
    /// ([`lineage_core::retention::DEFAULT_DISPOSED_AFTER_MS`]).
    pub fn new(node: NodeId, subjects: Subjects) -> Self {
        HostConfig {
            node,
            subjects,
            lease: Duration::from_secs(10),
            heartbeat_every: Duration::from_secs(2),
            max_depth: None,
            fan_out: lineage_core::fanout::FanOut::NONE,
            request_timeout: Duration::from_secs(10),
            one_shot_timeout: Duration::from_secs(300),
            registry_attempts: 5,
            takeover_after: None,
            streams: lineage_bus::StreamOptions::default(),
            disposed_after: Some(Duration::from_millis(
                lineage_core::retention::DEFAULT_DISPOSED_AFTER_MS,
            )),
            request_results_kept: None,
        }
    }
}

/// What a host talks to. [`HostDeps::nats`] for a node on NATS; [`HostDeps::with_ports`] for a
/// host on other ports (the in-memory twins of `lineage_bus::memory`, feature `twins`) and no NATS at all.
#[derive(Clone)]
pub struct HostDeps {
    /// The NATS connection the ports are opened on when `ports` is `None`.
    pub nats: Option<async_nats::Client>,
    /// The session event log, the parent inbox, the lifecycle events and the control transport
    /// (requests to other nodes, the control service [`crate::service::serve`], drain
    /// progress). `None`: [`Host::start`] opens the NATS ports on `nats` (streams as
    /// [`HostConfig::streams`] says).
    pub ports: Option<BusPorts>,
    /// The registry.
    pub registry: Arc<dyn RegistryPort>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Drivers.
    pub drivers: Arc<dyn DriverFactory>,
}

impl HostDeps {
    /// A host on NATS: the ports are opened on `nats` by [`Host::start`].
    pub fn nats(
        nats: async_nats::Client,
        registry: Arc<dyn RegistryPort>,
        clock: Arc<dyn Clock>,
        drivers: Arc<dyn DriverFactory>,
    ) -> Self {
        HostDeps {
            nats: Some(nats),
            ports: None,
            registry,
            clock,
            drivers,
        }
    }

    /// A host on the given ports and no NATS (e.g. `BusPorts::memory`, feature `twins`): it hosts agents,
    /// but cannot reach another node (such a request is refused as unavailable).
    pub fn with_ports(
        ports: BusPorts,
        registry: Arc<dyn RegistryPort>,
        clock: Arc<dyn Clock>,
        drivers: Arc<dyn DriverFactory>,
    ) -> Self {
        HostDeps {
            nats: None,
            ports: Some(ports),
            registry,
            clock,
            drivers,
        }
    }
}

/// A live agent as the host sees it (the task owns everything else).
#[derive(Clone)]
pub(crate) struct AgentHandle {
    pub(crate) tx: mpsc::UnboundedSender<AgentCmd>,
    pub(crate) turn: Arc<Mutex<Option<CancellationToken>>>,
    pub(crate) header: SessionHeader,
    pub(crate) owner: Option<SessionId>,
    pub(crate) shape: Option<SubagentShape>,
    pub(crate) policy_view: lineage_core::policy::ParentPolicyView,
    pub(crate) preset: Option<lineage_core::header::AgentPreset>,
    /// Its tool filter (C1), which its children's can only narrow.
    pub(crate) tool_filter: Option<Vec<String>>,
    /// Stops the agent's task without settling (see [`crate::fence`]).
    pub(crate) stop: CancellationToken,
}

/// State shared by the host and its agent tasks.
pub(crate) struct Shared {
    pub(crate) cfg: HostConfig,
    pub(crate) registry: Arc<dyn RegistryPort>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) mint: IdMint,
    pub(crate) drivers: Arc<dyn DriverFactory>,
    pub(crate) inbox: Arc<dyn Inbox>,
    pub(crate) events: Arc<dyn EventLog>,
    pub(crate) lifecycle: Arc<dyn Lifecycle>,
    pub(crate) control: Arc<dyn ControlTransport>,
    pub(crate) output: Arc<dyn lineage_bus::TurnOutputs>,
    pub(crate) agents: Mutex<HashMap<SessionId, AgentHandle>>,
    /// Births under way here: registered (or about to be) and not live yet. A resume of one
    /// answers `Starting` instead of finding its log still empty ([`crate::start`]).
    pub(crate) births: Mutex<HashSet<SessionId>>,
    /// Resumes under way here (K1): a second resume of the same session (re-adoption at
    /// start-up racing a followup's resume) waits for the first instead of launching it twice.
    pub(crate) resuming: Mutex<HashSet<SessionId>>,
    /// Sessions whose outbox an adoption here sent again ([`crate::outbox`]): once each.
    pub(crate) resent: Mutex<HashSet<SessionId>>,
    pub(crate) ancestry: Mutex<LocalAncestry>,
    pub(crate) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    pub(crate) shutdown: CancellationToken,
    /// Graceful shutdown began ([`crate::handoff`]): no new turn starts here, no session is
    /// resumed here, the sweeps stop.
    pub(crate) winding: CancellationToken,
    /// Graceful shutdown reached its hand-off: nothing new is hosted here any more.
    pub(crate) handing_off: std::sync::atomic::AtomicBool,
    pub(crate) metrics: HostMetrics,
    /// When the lease was last renewed (ms; 0: never), to see a lapse ([`crate::fence`]).
    pub(crate) last_renewal_ms: std::sync::atomic::AtomicU64,
    /// Until when this node surely holds its lease (ms; 0: not yet), once the placements were
    /// checked after a lapse: past it, its inbox readers take nothing ([`crate::fence`]).
    pub(crate) lease_until_ms: std::sync::atomic::AtomicU64,
    /// When the stored results were last swept ([`crate::retention`]; ms, 0: never).
    pub(crate) results_swept_at_ms: std::sync::atomic::AtomicU64,
}

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

impl Shared {
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    pub(crate) fn node(&self) -> &NodeId {
        &self.cfg.node
    }

    pub(crate) fn handle(&self, session: &SessionId) -> Option<AgentHandle> {
        self.agents
            .lock()
            .ok()
            .and_then(|agents| agents.get(session).cloned())
    }

    pub(crate) fn is_live(&self, session: &SessionId) -> bool {
        self.handle(session).is_some()
    }

    /// Whether `session`'s birth is under way on this node (see [`Shared::births`]).
    pub(crate) fn is_being_born(&self, session: &SessionId) -> bool {
        self.births
            .lock()
            .map(|births| births.contains(session))
            .unwrap_or(false)
    }

    /// Registers a live agent (and its local ancestry). Fails if it is already live here.
    pub(crate) fn insert(&self, session: SessionId, handle: AgentHandle) -> Result<(), HostError> {
        let mut agents = self
            .agents
            .lock()
            .map_err(|_| HostError::Internal("agent table mutex poisoned".to_owned()))?;
        if agents.contains_key(&session) {
            return Err(HostError::Internal(format!(
                "session {session} is already live on node {}",
                self.cfg.node
            )));
        }
        if let Ok(mut ancestry) = self.ancestry.lock() {
            ancestry.materialize(session.clone(), handle.header.parent_session().cloned())?;
        }
        agents.insert(session, handle);
        Ok(())
    }

    /// Drops a live agent from the table (its task ends on its own).
    pub(crate) fn remove(&self, session: &SessionId) {
        if let Ok(mut agents) = self.agents.lock() {
            agents.remove(session);
        }
        if let Ok(mut ancestry) = self.ancestry.lock() {
            ancestry.forget(session);
        }
    }

    /// Sends a command to a live agent; `NotLive` when it is not hosted here.
    pub(crate) fn send(&self, session: &SessionId, cmd: AgentCmd) -> Result<(), HostError> {
        let handle = self.handle(session).ok_or_else(|| self.not_live(session))?;
        handle.tx.send(cmd).map_err(|_| self.not_live(session))
    }

    /// Sends a command carrying a reply channel and waits for the reply.
    pub(crate) async fn ask<T>(
        &self,
        session: &SessionId,
        make: impl FnOnce(oneshot::Sender<T>) -> AgentCmd,
    ) -> Result<T, HostError> {
        let (tx, rx) = oneshot::channel();
        self.send(session, make(tx))?;
        rx.await.map_err(|_| self.not_live(session))
    }

    pub(crate) fn not_live(&self, session: &SessionId) -> HostError {
        HostError::NotLive {
            session: session.to_string(),
            node: self.cfg.node.to_string(),
        }
    }

    /// A registry write with a fresh request id, retried on unavailability.
    pub(crate) async fn write(
        &self,
        make: impl Fn(lineage_core::ids::RequestId, u64) -> Command,
    ) -> Result<lineage_registry::types::CommandResponse, HostError> {
        let request_id = self.mint.request();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self
                .registry
                .write(make(request_id.clone(), self.now()))
                .await
            {
                Err(HostError::RegistryUnavailable(reason))
                    if attempt < self.cfg.registry_attempts.max(1) =>
                {
                    tracing::warn!(%reason, attempt, "registry unavailable; retrying");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
                other => return other,
            }
        }
    }

    /// Records an activation state in the registry.
    pub(crate) async fn set_state(
        &self,
        session: &SessionId,
        state: SessionState,
        epoch: Option<u64>,
    ) -> Result<(), HostError> {
        self.write(|request_id, at_ms| Command::SetState {
            request_id,
            at_ms,
            session: session.clone(),
            state,
            expected_epoch: epoch,
        })
        .await
        .map(|_| ())
    }

    /// Records the usage a hosted agent reported (fenced by its epoch).
    pub(crate) async fn record_usage(
        &self,
        session: &SessionId,
        usage: lineage_core::usage::SessionUsage,
        epoch: Option<u64>,
    ) -> Result<(), HostError> {
        self.write(|request_id, at_ms| Command::RecordUsage {
            request_id,
            at_ms,
            session: session.clone(),
            usage: usage.clone(),
            expected_epoch: epoch,
        })
        .await
        .map(|_| ())
    }

    pub(crate) fn check_running(&self) -> Result<(), HostError> {
        if self.shutdown.is_cancelled()
            || self.handing_off.load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(HostError::ShuttingDown(self.cfg.node.to_string()));
        }
        Ok(())
    }

    /// Whether graceful shutdown began (see [`crate::handoff`]).
    pub(crate) fn winding_down(&self) -> bool {
        self.winding.is_cancelled()
    }

    /// Refuses to take a session here once graceful shutdown began: a resume, re-adoption or
    /// takeover belongs to a node that stays.
    pub(crate) fn check_resumable(&self) -> Result<(), HostError> {
        self.check_running()?;
        if self.winding_down() {
            return Err(HostError::ShuttingDown(self.cfg.node.to_string()));
        }
        Ok(())
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
        let shared = Arc::new(Shared {
            mint: IdMint::new(deps.clock.clone()),
            cfg: config,
            registry: deps.registry,
            clock: deps.clock,
            drivers: deps.drivers,
            inbox: ports.inbox,
            events: ports.events,
            lifecycle: ports.lifecycle,
            control: ports.control,
            output: ports.output,
            agents: Mutex::new(HashMap::new()),
            births: Mutex::new(HashSet::new()),
            resuming: Mutex::new(HashSet::new()),
            resent: Mutex::new(HashSet::new()),
            ancestry: Mutex::new(LocalAncestry::new()),
            tasks: Mutex::new(Vec::new()),
            shutdown,
            winding: CancellationToken::new(),
            handing_off: std::sync::atomic::AtomicBool::new(false),
            metrics: HostMetrics::default(),
            last_renewal_ms: std::sync::atomic::AtomicU64::new(0),
            lease_until_ms: std::sync::atomic::AtomicU64::new(0),
            results_swept_at_ms: std::sync::atomic::AtomicU64::new(0),
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
        self.shared.shutdown.clone()
    }

    /// This host's counters (spawns, settlements, resumes, reports, inbox, drains).
    pub fn metrics(&self) -> &HostMetrics {
        &self.shared.metrics
    }

    /// True when `session` is live on this node.
    pub fn is_live(&self, session: &SessionId) -> bool {
        self.shared.is_live(session)
    }

    /// The agent profiles this node offers (T4).
    pub fn agents(&self) -> crate::control::AgentsReply {
        let mut offer = self.shared.drivers.offer();
        offer.node = Some(self.shared.cfg.node.clone());
        offer
    }

    /// What this node hosts now.
    pub fn status(&self) -> StatusReply {
        let mut live: Vec<LiveAgent> = self
            .shared
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
        self.shared.shutdown.cancel();
        let tasks: Vec<_> = self
            .shared
            .tasks
            .lock()
            .map(|mut t| t.drain(..).collect())
            .unwrap_or_default();
        for task in tasks {
            let _ = task.await;
        }
        if let Ok(mut agents) = self.shared.agents.lock() {
            agents.clear();
        }
    }
}
