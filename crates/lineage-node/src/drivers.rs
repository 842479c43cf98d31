//! [`NodeDrivers`]: the drivers a node can run (H1): the scripted agent and ACP subprocesses.

use std::path::PathBuf;

use lineage_host::acp::AcpDriver;
use lineage_host::driver::{AgentDriver, AgentSpec};
use lineage_host::error::HostError;
use lineage_host::host::DriverFactory;
use lineage_host::script::ScriptDriver;

/// Builds a driver for any agent spec this node supports.
#[derive(Debug, Clone)]
pub struct NodeDrivers {
    work_dir: PathBuf,
}

impl NodeDrivers {
    /// ACP agents run with `work_dir` as their working directory.
    pub fn new(work_dir: PathBuf) -> Self {
        NodeDrivers { work_dir }
    }
}

impl DriverFactory for NodeDrivers {
    fn make(&self, spec: &AgentSpec) -> Result<Box<dyn AgentDriver>, HostError> {
        match spec {
            AgentSpec::Script { script } => Ok(Box::new(ScriptDriver::new(script.clone()))),
            AgentSpec::Acp { command } => Ok(Box::new(AcpDriver::new(
                command.clone(),
                self.work_dir.clone(),
            ))),
        }
    }
}
