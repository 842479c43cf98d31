//! [`Shared`]: the state a host shares with its agent tasks, in named parts, and the registry
//! writes every operation makes through it. Only state and those writes live here; each
//! operation is a file of its own ([`crate::spawn`], [`crate::settle`], ...).

use std::sync::Arc;
use std::time::Duration;

use lineage_bus::ports::BusPorts;
use lineage_core::ids::{NodeId, SessionId};
use lineage_registry::types::{Command, SessionState};

use crate::clock::{Clock, IdMint};
use crate::config::HostConfig;
use crate::error::HostError;
use crate::lease::LeaseMarks;
use crate::lifetime::Lifetime;
use crate::live::Live;
use crate::registry::RegistryPort;
use crate::telemetry::HostMetrics;
use lineage_drivers::driver::DriverFactory;

/// State shared by the host and its agent tasks, in named parts: what the host is ([`HostConfig`]),
/// what it talks to (the bus ports, the registry port, the drivers, the clock), what lives on it
/// ([`Live`]), how long it runs ([`Lifetime`]) and whether it holds its lease
/// ([`LeaseMarks`]).
pub(crate) struct Shared {
    pub(crate) cfg: HostConfig,
    /// The bus: event log, parent inbox, lifecycle events, control transport (peers and
    /// forwarding), turn output.
    pub(crate) bus: BusPorts,
    pub(crate) registry: Arc<dyn RegistryPort>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) mint: IdMint,
    pub(crate) drivers: Arc<dyn DriverFactory>,
    /// The live agents, births and resumes under way.
    pub(crate) live: Live,
    /// Background tasks and shutdown.
    pub(crate) lifetime: Lifetime,
    /// The node lease as this node last saw it ([`crate::fence`]).
    pub(crate) lease: LeaseMarks,
    pub(crate) metrics: Arc<HostMetrics>,
    /// When the stored results were last swept ([`crate::retention`]; ms, 0: never).
    pub(crate) results_swept_at_ms: std::sync::atomic::AtomicU64,
    /// Snapshots this node packed for a child's base, kept for a child that starts here
    /// ([`crate::workspace::JustPacked`]).
    pub(crate) just_packed: crate::workspace::JustPacked,
}

impl Shared {
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    pub(crate) fn node(&self) -> &NodeId {
        &self.cfg.node
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
        (state, stop_reason): (SessionState, Option<lineage_core::messages::StopReason>),
        epoch: Option<u64>,
    ) -> Result<(), HostError> {
        self.write(|request_id, at_ms| Command::SetState {
            stop_reason,
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
}
