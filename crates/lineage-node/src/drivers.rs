//! [`NodeDrivers`]: the drivers a node can run (H1, T4): the scripted agent and ACP
//! subprocesses, as its `[agents]` profiles allow. An ACP agent whose profile has `tools = true`
//! gets lineage's delegation tools (T1): a grant on the node's tools socket, declared in its
//! `session/new` as the stdio MCP server `lineage mcp` (this binary).

use std::path::PathBuf;
use std::time::Duration;

use lineage_core::ids::SessionId;
use lineage_drivers::acp::{AcpDriver, AgentTools};
use lineage_drivers::driver::{AgentDriver, AgentSpec, DriverFactory};
use lineage_drivers::profiles::{offer_of, AcpLaunch, Admitted, AgentProfiles};
use lineage_drivers::script::ScriptDriver;
use lineage_drivers::tools::socket::ToolsSocket;
use lineage_drivers::tools::TurnSlot;
use lineage_drivers::DriverError;
use lineage_host::control::AgentsReply;

/// Builds a driver for the agent specs this node's profiles admit.
#[derive(Debug, Clone)]
pub struct NodeDrivers {
    data_dir: PathBuf,
    profiles: AgentProfiles,
    tools: Option<Tools>,
}

/// Where hosted agents get their tools: the node's socket and the bridge they start.
#[derive(Debug, Clone)]
struct Tools {
    socket: ToolsSocket,
    bridge: Vec<String>,
}

impl NodeDrivers {
    /// Agents run under `data_dir` (as each profile's `workdir` says) with `profiles`.
    pub fn new(data_dir: PathBuf, profiles: AgentProfiles) -> Self {
        NodeDrivers {
            data_dir,
            profiles,
            tools: None,
        }
    }

    /// Agents whose profile has `tools = true` get their tools through `socket`, starting
    /// `bridge` (program, then arguments: `lineage mcp`) as their MCP server.
    pub fn with_tools(mut self, socket: ToolsSocket, bridge: Vec<String>) -> Self {
        self.tools = Some(Tools { socket, bridge });
        self
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
            Admitted::Acp(launch) => {
                let tools = match (launch.tools, &self.tools) {
                    (false, _) => None,
                    (true, Some(tools)) => Some(tools.grant(session)),
                    (true, None) => {
                        return Err(DriverError::ToolsSocket(
                            "this node serves no tools socket, so a profile with tools = true cannot run here; check the node's data_dir".into(),
                        ))
                    }
                };
                let driver = acp_driver(launch)?;
                Ok(Box::new(match tools {
                    Some(tools) => driver.with_tools(tools),
                    None => driver,
                }))
            }
        }
    }

    fn offer(&self) -> AgentsReply {
        offer_of(&self.profiles)
    }
}

impl Tools {
    /// A fresh grant for `session`: its secret in the bridge's environment.
    fn grant(&self, session: &SessionId) -> AgentTools {
        let slot = TurnSlot::default();
        let grant = self.socket.grant(session.clone(), slot.clone());
        AgentTools {
            bridge: self.bridge.clone(),
            env: grant.env(),
            http: grant.http(),
            slot,
            grant: std::sync::Arc::new(grant),
        }
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
        .with_prompt_timeout(Duration::from_millis(launch.prompt_timeout_ms))
        .with_session_modes(launch.modes)
        .with_tools_over_stdio(launch.tools_stdio))
}
