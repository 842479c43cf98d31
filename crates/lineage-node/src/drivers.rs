//! [`NodeDrivers`]: the drivers a node can run (H1, T4): the scripted agent and ACP
//! subprocesses, as its `[agents]` profiles allow.

use std::path::PathBuf;
use std::time::Duration;

use lineage_core::ids::SessionId;
use lineage_drivers::acp::AcpDriver;
use lineage_drivers::driver::{AgentDriver, AgentSpec, DriverFactory};
use lineage_drivers::profiles::{offer_of, AcpLaunch, Admitted, AgentProfiles};
use lineage_drivers::script::ScriptDriver;
use lineage_drivers::DriverError;
use lineage_host::control::AgentsReply;

/// Builds a driver for the agent specs this node's profiles admit.
#[derive(Debug, Clone)]
pub struct NodeDrivers {
    data_dir: PathBuf,
    profiles: AgentProfiles,
}

impl NodeDrivers {
    /// Agents run under `data_dir` (as each profile's `workdir` says) with `profiles`.
    pub fn new(data_dir: PathBuf, profiles: AgentProfiles) -> Self {
        NodeDrivers { data_dir, profiles }
    }
}

impl DriverFactory for NodeDrivers {
    fn make(
        &self,
        spec: &AgentSpec,
        session: &SessionId,
    ) -> Result<Box<dyn AgentDriver>, DriverError> {
        let env = |name: &str| std::env::var(name).ok();
        match self
            .profiles
            .admit(spec, Some(session), &self.data_dir, &env)?
        {
            Admitted::Script(script) => Ok(Box::new(ScriptDriver::new(script))),
            Admitted::Acp(launch) => Ok(Box::new(acp_driver(launch)?)),
        }
    }

    fn offer(&self) -> AgentsReply {
        offer_of(&self.profiles)
    }
}

/// The ACP driver for a launch, its working directory created when it is the session's own.
fn acp_driver(launch: AcpLaunch) -> Result<AcpDriver, DriverError> {
    std::fs::create_dir_all(&launch.workdir).map_err(|e| {
        DriverError::BadRequest(format!(
            "cannot create the agent's working directory {}: {e}; check the profile's workdir and node.data_dir",
            launch.workdir.display()
        ))
    })?;
    Ok(AcpDriver::new(launch.command, launch.workdir)
        .with_env(launch.env)
        .with_prompt_timeout(Duration::from_millis(launch.prompt_timeout_ms)))
}
