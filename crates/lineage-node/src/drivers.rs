//! [`NodeDrivers`]: the drivers a node can run (H1, T4): the scripted agent and ACP
//! subprocesses, as its `[agents]` profiles allow. An ACP agent whose profile has `tools = true`
//! gets lineage's delegation tools (T1): a grant on the node's tools socket, declared in its
//! `session/new` as the stdio MCP server `lineage mcp` (this binary).

use std::path::PathBuf;
use std::time::Duration;

use lineage_core::ids::SessionId;
use lineage_drivers::acp::WarmPool;
use lineage_drivers::acp::{AcpDriver, AgentTools, Approver};
use lineage_drivers::driver::{AgentDriver, AgentSpec, DriverFactory, FilesRule};
use lineage_drivers::profiles::{offer_of, AcpLaunch, Admitted, AgentProfiles};
use lineage_drivers::sandbox::UidPool;
use lineage_drivers::script::ScriptDriver;
use lineage_drivers::tools::socket::ToolsSocket;
use lineage_drivers::tools::TurnSlot;
use lineage_drivers::DriverError;
use lineage_host::control::AgentsReply;
use lineage_protocol::approval::{ApprovalReply, ApprovalRequest, APPROVAL_VERSION};

/// Builds a driver for the agent specs this node's profiles admit.
#[derive(Debug, Clone)]
pub struct NodeDrivers {
    pub(crate) data_dir: PathBuf,
    pub(crate) profiles: AgentProfiles,
    pub(crate) tools: Option<Tools>,
    approvals: Option<Approvals>,
    /// The uids sandboxes run as (`agents.sandbox_uids`, a root node).
    pub(crate) uids: Option<UidPool>,
    /// Sandboxes made ahead, two per sandboxed profile (V2, [`crate::warm`]).
    pub(crate) warm: WarmPool,
}

/// How long a root's permission request waits for the person behind its editor before it is
/// refused (C4).
pub const APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);

/// Where a root opened through an editor asks about a permission request: its session's
/// approval subject (`lineage_protocol::approval`), answered by the front door that holds it.
#[derive(Clone)]
struct Approvals {
    nats: async_nats::Client,
    subjects: lineage_bus::Subjects,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").finish_non_exhaustive()
    }
}

impl Approvals {
    /// The approver of `session`: one request on its approval subject; no answer within
    /// [`APPROVAL_TIMEOUT`], no responder, or a malformed answer is a refusal (`None`).
    fn approver(&self, session: &SessionId) -> Approver {
        let (nats, subject, session) = (
            self.nats.clone(),
            self.subjects.session_approval(session),
            session.clone(),
        );
        Approver(std::sync::Arc::new(move |title, tool_kind, options| {
            let (nats, subject) = (nats.clone(), subject.clone());
            let request = ApprovalRequest {
                v: APPROVAL_VERSION,
                session: session.clone(),
                title,
                tool_kind,
                options,
                timeout_ms: u64::try_from(APPROVAL_TIMEOUT.as_millis()).unwrap_or(u64::MAX),
            };
            Box::pin(async move {
                let body = serde_json::to_vec(&request).ok()?;
                let asked = nats.request(subject.clone(), body.into());
                match tokio::time::timeout(APPROVAL_TIMEOUT, asked).await {
                    Ok(Ok(message)) => match ApprovalReply::decode(&message.payload) {
                        Ok(reply) => reply.option,
                        Err(e) => {
                            tracing::warn!(%subject, error = %e, "a malformed approval answer: refused");
                            None
                        }
                    },
                    Ok(Err(e)) => {
                        tracing::info!(%subject, error = %e, "nobody answered the approval request: refused");
                        None
                    }
                    Err(_) => {
                        tracing::info!(%subject, "no approval within the timeout: refused");
                        None
                    }
                }
            })
        }))
    }
}

/// Where hosted agents get their tools: the node's socket and the bridge they start.
#[derive(Debug, Clone)]
pub(crate) struct Tools {
    pub(crate) socket: ToolsSocket,
    pub(crate) bridge: Vec<String>,
}

impl NodeDrivers {
    /// Agents run under `data_dir` (as each profile's `workdir` says) with `profiles`.
    pub fn new(data_dir: PathBuf, profiles: AgentProfiles) -> Self {
        let uids = profiles.sandbox_uids.map(UidPool::new);
        NodeDrivers {
            data_dir,
            profiles,
            tools: None,
            approvals: None,
            uids,
            warm: WarmPool::default(),
        }
    }

    /// Roots opened through an editor ask it about their agents' permission requests over
    /// `nats` (C4).
    pub fn with_approvals(
        mut self,
        nats: async_nats::Client,
        subjects: lineage_bus::Subjects,
    ) -> Self {
        self.approvals = Some(Approvals { nats, subjects });
        self
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
            Admitted::A2a(launch) => Ok(Box::new(lineage_drivers::a2a::A2aDriver::new(
                *launch, session,
            ))),
            Admitted::Acp(mut launch) => {
                let own_files = self.own_files(&launch, session);
                let tools = match (launch.tools, &self.tools) {
                    (false, _) => None,
                    (true, Some(tools)) => Some(tools.grant(session, !launch.tools_stdio)),
                    (true, None) => {
                        return Err(DriverError::ToolsSocket(
                            "this node serves no tools socket, so a profile with tools = true cannot run here; check the node's data_dir".into(),
                        ))
                    }
                };
                let warm = self.claim_warm(spec, session, &mut launch);
                let mut driver = match warm {
                    Some(warm) => warmed_driver(*launch, warm),
                    None => acp_driver(*launch, self.tools.as_ref(), self.uids.as_ref(), session)?,
                };
                if let Some(approvals) = &self.approvals {
                    driver = driver.with_approver(approvals.approver(session));
                }
                if let Some(files) = own_files {
                    driver = driver.with_own_files(files);
                }
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

    fn git_protocols(&self) -> Vec<String> {
        self.profiles.git_protocols.clone()
    }

    fn ends_remotely(&self, spec: &AgentSpec) -> bool {
        match spec {
            AgentSpec::Profile { profile } => self
                .profiles
                .profiles
                .get(profile)
                .is_some_and(|p| p.driver == lineage_protocol::agent::ProfileDriver::A2a),
            AgentSpec::Script { .. } | AgentSpec::Acp { .. } => false,
        }
    }

    fn has_remote_agents(&self) -> bool {
        self.profiles
            .profiles
            .values()
            .any(|p| p.driver == lineage_protocol::agent::ProfileDriver::A2a)
    }

    fn files_rule(&self, spec: &AgentSpec, session: &SessionId) -> Option<FilesRule> {
        let env = |name: &str| std::env::var(name).ok();
        match self
            .profiles
            .admit(spec, Some(session), &self.data_dir, &env)
            .ok()?
        {
            Admitted::Script(_) | Admitted::A2a(_) => None,
            Admitted::Acp(launch) => self.own_files(&launch, session).map(|own| FilesRule {
                caps: own.caps,
                uploads: launch.workspace_uploads,
            }),
        }
    }
}

impl NodeDrivers {
    /// A per-session workdir is the session's own files (issue 39); a shared one (`data_dir`,
    /// an operator's path) is not, and gets no workspace.
    fn own_files(
        &self,
        launch: &lineage_drivers::profiles::AcpLaunch,
        session: &SessionId,
    ) -> Option<lineage_drivers::driver::OwnFiles> {
        let own = self.data_dir.join("work").join(session.as_str());
        launch
            .workdir
            .starts_with(&own)
            .then_some(lineage_drivers::driver::OwnFiles {
                dir: own,
                caps: launch.workspace_caps,
            })
    }
}

impl Tools {
    /// A fresh grant for `session`: its secret in the bridge's environment (and over HTTP when
    /// `http`).
    fn grant(&self, session: &SessionId, http: bool) -> AgentTools {
        let slot = TurnSlot::default();
        let grant = self.socket.grant(session.clone(), slot.clone(), http);
        AgentTools {
            bridge: self.bridge.clone(),
            env: grant.env(),
            http: grant.http(),
            slot,
            grant: std::sync::Arc::new(grant),
        }
    }
}

/// The ACP driver for a launch, its working directory created (mode 0700: only the node's
/// user and the session's own sandbox enter it, V2); in its sandbox, which also shows the
/// tools socket and the bridge when the session has tools.
fn acp_driver(
    launch: AcpLaunch,
    tools: Option<&Tools>,
    uids: Option<&UidPool>,
    session: &SessionId,
) -> Result<AcpDriver, DriverError> {
    use std::os::unix::fs::PermissionsExt;
    let created = std::fs::create_dir_all(&launch.workdir).and_then(|()| {
        std::fs::set_permissions(&launch.workdir, std::fs::Permissions::from_mode(0o700))
    });
    created.map_err(|e| {
        DriverError::BadRequest(format!(
            "cannot create the agent's working directory {}: {e}; check the profile's workdir and node.data_dir",
            launch.workdir.display()
        ))
    })?;
    let mut launch = launch;
    if launch.sandbox.is_some() {
        // A session that started in a warm sandbox has its workdir there (a link): the
        // sandbox shows the directory itself, at the same path as the first time.
        if let Ok(real) = std::fs::canonicalize(&launch.workdir) {
            relocate(&mut launch, real);
        }
    }
    let mut driver = AcpDriver::new(launch.command.clone(), launch.workdir.clone())
        .with_env(launch.env.clone())
        .with_prompt_timeout(Duration::from_millis(launch.prompt_timeout_ms))
        .with_session_modes(launch.modes.clone());
    if let Some(mut plan) = launch.sandbox.take() {
        finish_plan(&mut plan, launch.tools, tools);
        if let Some(uids) = uids {
            // A uid of its own outside the namespaces too, the same one again when free.
            let hint = session
                .as_str()
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
            let lease = uids.take(hint).ok_or_else(|| DriverError::Agent {
                session: session.to_string(),
                reason: "no sandbox uid is free: every uid of agents.sandbox_uids runs a live session; widen the range".into(),
            })?;
            lineage_drivers::sandbox::chown_tree(&plan.workdir, lease.uid).map_err(|e| {
                DriverError::BadRequest(format!(
                    "cannot give the working directory {} to the sandbox's uid {}: {e}",
                    plan.workdir.display(),
                    lease.uid
                ))
            })?;
            plan.uid = Some(lease.uid);
            driver = driver.with_uid_lease(lease);
        }
        driver = driver.with_sandbox(plan);
    }
    Ok(driver
        .with_tools_over_stdio(launch.tools_stdio)
        .with_editor_mcp_servers(launch.pass_mcp_servers))
}

/// What every sandbox of the node shows besides the profile's: the tools socket and the
/// bridge (`lineage mcp`) when the session has tools.
pub(crate) fn finish_plan(
    plan: &mut lineage_drivers::sandbox::SandboxPlan,
    with_tools: bool,
    tools: Option<&Tools>,
) {
    if let (true, Some(tools)) = (with_tools, tools) {
        plan.sockets.push(tools.socket.path().to_path_buf());
    }
    if let Ok(exe) = std::env::current_exe() {
        plan.read_only.push(exe);
    }
}

/// Moves a launch to working directory `to`: its sandbox's, and `HOME` when it was the old one.
pub(crate) fn relocate(launch: &mut AcpLaunch, to: PathBuf) {
    let old = launch.workdir.display().to_string();
    if launch.env.get("HOME") == Some(&old) {
        launch
            .env
            .insert("HOME".to_owned(), to.display().to_string());
    }
    if let Some(plan) = launch.sandbox.as_mut() {
        plan.workdir = to.clone();
    }
    launch.workdir = to;
}

/// The driver of a launch that takes over a warm sandbox (its workdir is the sandbox's).
fn warmed_driver(launch: AcpLaunch, warm: lineage_drivers::acp::WarmSandbox) -> AcpDriver {
    let mut driver = AcpDriver::new(launch.command, launch.workdir)
        .with_env(launch.env)
        .with_prompt_timeout(Duration::from_millis(launch.prompt_timeout_ms))
        .with_session_modes(launch.modes);
    if let Some(plan) = launch.sandbox {
        // A later start of the agent (a restart) makes a sandbox of its own like this one.
        driver = driver.with_sandbox(plan);
    }
    driver
        .with_warm_sandbox(warm)
        .with_tools_over_stdio(launch.tools_stdio)
        .with_editor_mcp_servers(launch.pass_mcp_servers)
}
