//! [`HostConfig`], a host's static settings, and [`HostDeps`], what it talks to: both given to
//! [`crate::host::Host::start`] (and re-exported by [`crate::host`]).

use std::sync::Arc;
use std::time::Duration;

use lineage_bus::ports::BusPorts;
use lineage_bus::Subjects;
use lineage_core::depth::MaxDepth;
use lineage_core::ids::NodeId;
use lineage_drivers::driver::DriverFactory;

use crate::clock::Clock;
use crate::registry::RegistryPort;

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
    /// How long a top-level session born here may stay idle before its tree is drained with
    /// stop reason `idle` (`limits.idle_root_ms`), when its spawn gives none; `None`: roots
    /// stay until drained.
    pub idle_root: Option<lineage_core::idle::IdleTtl>,
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
            idle_root: None,
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
