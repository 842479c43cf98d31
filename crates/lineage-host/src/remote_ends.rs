//! A drain tells a cold session's other side that it ended (issue 38, A2): a session hosted
//! nowhere is disposed from the registry alone, with no driver to [`AgentDriver::dispose`] it,
//! so an A2A child that settled between turns would leave its remote task idle
//! (`input-required`) for ever. For each such session whose agent
//! [`DriverFactory::ends_remotely`] (read from its `host/agent` record), the draining node
//! starts a driver from the session's log only to dispose it (the A2A driver reads its remote
//! task from the log and cancels it), then shuts it down. Nothing is read unless the node runs
//! such agents at all; each is bounded in time, and a failure is a log line (the drain's
//! outcome does not depend on the remote).
//!
//! [`AgentDriver::dispose`]: lineage_drivers::driver::AgentDriver::dispose
//! [`DriverFactory::ends_remotely`]: lineage_drivers::driver::DriverFactory::ends_remotely

use std::time::Duration;

use futures::stream::{self, StreamExt};
use lineage_core::ids::SessionId;
use lineage_drivers::driver::{DriverComposition, DriverStart};

use crate::agent::{AgentRecord, AGENT_EVENT};
use crate::shared::Shared;

/// How many cold sessions are told at once.
const AT_ONCE: usize = 8;
/// How long one may take (start, dispose, shutdown).
const WITHIN: Duration = Duration::from_secs(15);

impl Shared {
    /// Tells the other side of every session in `cold` that ends remotely.
    pub(crate) async fn tell_remote_ends(&self, cold: &[SessionId]) {
        if cold.is_empty() || !self.drivers.has_remote_agents() {
            return;
        }
        stream::iter(cold)
            .for_each_concurrent(AT_ONCE, |session| async move {
                if tokio::time::timeout(WITHIN, self.tell_remote_end(session))
                    .await
                    .is_err()
                {
                    tracing::info!(%session, "telling a drained session's remote side took too long");
                }
            })
            .await;
    }

    async fn tell_remote_end(&self, session: &SessionId) {
        let log = match self.bus.events.read(session).await {
            Ok((events, _)) => events,
            Err(e) => {
                tracing::info!(%session, error = %e, "cannot read a drained session's log");
                return;
            }
        };
        let Some(record) = log
            .iter()
            .find(|e| e.kind == AGENT_EVENT)
            .and_then(|e| serde_json::from_value::<AgentRecord>(e.data.clone()).ok())
        else {
            return;
        };
        if !self.drivers.ends_remotely(&record.agent) {
            return;
        }
        let mut driver = match self.drivers.make(&record.agent, session) {
            Ok(driver) => driver,
            Err(e) => {
                tracing::info!(%session, error = %e, "cannot make a drained session's driver to end its remote side");
                return;
            }
        };
        let start = DriverStart {
            session: session.clone(),
            log,
            resumed: true,
            composition: DriverComposition::default(),
        };
        match driver.start(start).await {
            Ok(()) => driver.dispose().await,
            Err(e) => {
                tracing::info!(%session, error = %e, "cannot start a drained session's driver to end its remote side")
            }
        }
        driver.shutdown().await;
    }
}
