//! The `acp` driver (H1): runs an Agent Client Protocol agent as a subprocess over stdio.
//!
//! [`AcpDriver::start`](crate::driver::AgentDriver::start) spawns the agent command
//! (`kill_on_drop`), sends `initialize` and then `session/new`. On a cold resume (K1) it sends
//! `session/load` when the agent advertised `loadSession` and the log names the agent's session
//! (an [`ACP_SESSION_EVENT`] event); otherwise it opens a new session and replays the log's
//! `turn/user` and `turn/assistant` events as context in the first prompt.
//!
//! Each turn is one `session/prompt` whose text blocks are the turn's messages; the streamed
//! `agent_message_chunk` updates are joined into the reply. Interrupting (M4) sends
//! `session/cancel`: either through an [`AcpCanceller`] while the turn runs (the turn then ends
//! with a `Fail` action saying it was cancelled), or by dropping the turn future and calling
//! [`AgentDriver::cancel`](crate::driver::AgentDriver::cancel), which also waits briefly for the
//! agent to wind the cancelled prompt down.
//!
//! `initialize` (and session setup) and every prompt have deadlines. Every failure is a
//! one-line [`DriverError`] (an agent's: [`DriverError::Agent`]); nothing the agent sends can
//! make the driver panic.
//!
//! The SDK's connection futures are `Send`, so the connection runs as an ordinary tokio task and
//! [`AcpDriver`] is `Send`.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | [`AcpDriver`]: settings, the [`AgentDriver`] impl, [`AcpCanceller`] |
//! | `start.rs` | spawn, connect, `initialize`, `session/new` or `session/load` |
//! | `live.rs` | a running agent: prompt turns, cancel, permission answers, shutdown |
//! | `process.rs` | the agent's process: piped stdio, stderr tail, exit status |
//! | `text.rs` | prompt text, the replayed history, one-line error text |

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use agent_client_protocol::v1::schema::{CancelNotification, SessionId as AcpSessionId};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::Agent;
use serde_json::Value;

use crate::driver::{AgentDriver, BoxFuture, DriverAction, DriverStart, TurnCtx, TurnInput};
use crate::error::DriverError;

mod live;
mod process;
mod start;
pub(crate) mod text;
mod warm;

pub use warm::{WarmPool, WarmSandbox};

use live::Live;
use text::{agent_error, one_line, sdk_error};

/// Log event kind that records the agent's own session id, data `{"acp_session_id": "..."}`.
/// The driver returns it from [`AgentDriver::start_record`]; a cold resume loads the session named
/// by the last such event.
pub const ACP_SESSION_EVENT: &str = "acp/session";
/// Default deadline for `initialize` and for opening or loading the session.
pub const DEFAULT_INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default deadline for one prompt turn.
pub const DEFAULT_PROMPT_TIMEOUT: Duration = Duration::from_secs(600);
/// Default time [`AgentDriver::cancel`] waits for the agent to end a cancelled prompt.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(5);

/// Asks the person behind a top-level session's editor about a permission request (C4): given
/// the tool call's title, its kind and the options, the id of the option picked, or `None`
/// (refused, dismissed, no answer in time, nobody there). The node makes one per session
/// (`lineage_protocol::approval` on NATS); the driver uses it only for a session whose policy
/// has an approval service.
#[derive(Clone)]
pub struct Approver(
    #[allow(clippy::type_complexity)]
    pub  std::sync::Arc<
        dyn Fn(
                String,
                Option<String>,
                Vec<lineage_protocol::approval::ApprovalOption>,
            ) -> BoxFuture<'static, Option<String>>
            + Send
            + Sync,
    >,
);

impl std::fmt::Debug for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Approver")
    }
}

/// How the driver answers an agent's `session/request_permission` requests (C4: a delegated
/// child never reaches a person; a root opened through an editor asks it).
#[derive(Debug, Clone, Default)]
pub enum PermissionPolicy {
    /// lineage's rule, the default: a call to one of lineage's own tools that the session may
    /// use (its tool filter; the tools it was given) is allowed once; anything else is asked of
    /// the `approver` when there is one (a root opened through an editor), else rejected
    /// (`reject_once`, else `reject_always`, else `cancelled`), so the model hears "refused"
    /// and goes on.
    Lineage {
        /// The session's own tools, when its profile has them.
        tools: Option<crate::tools::TurnSlot>,
        /// The person behind the session's editor, for a root whose policy has one.
        approver: Option<Approver>,
    },
    /// Answer `cancelled` (used while a cancelled prompt winds down).
    #[default]
    Deny,
    /// Pick the agent's `allow_once` option (else `allow_always`); `cancelled` when it offers
    /// neither. Development only: it approves anything.
    AllowOnce,
}

/// The ACP session mode a session runs in, by its policy (C4): a profile's `[agents.<name>.modes]`.
/// Keys are the delegated sandbox modes (`read-only`, `workspace-write`,
/// `danger-full-access`), `delegated` (a child without a sandbox mode) and `root` (a top-level
/// session); the value is one of the modes (or `mode` config option values) the agent offers.
pub type SessionModes = BTreeMap<String, String>;

/// What to run and the deadlines: everything an [`AcpDriver`] is configured with.
#[derive(Debug, Clone)]
struct Settings {
    /// Program, then arguments.
    command: Vec<String>,
    cwd: PathBuf,
    /// When set, the agent's whole environment (nothing else from the node leaks, T4).
    env: Option<BTreeMap<String, String>>,
    init_timeout: Duration,
    prompt_timeout: Duration,
    cancel_grace: Duration,
    permissions: Option<PermissionPolicy>,
    /// lineage's delegation tools for this session, when its profile has `tools = true`.
    tools: Option<AgentTools>,
    /// The session mode by policy (C4).
    modes: SessionModes,
    /// The tools over the stdio bridge even to an agent that takes HTTP.
    tools_stdio: bool,
    /// Whether a root's editor's HTTP MCP servers go to the agent (issue 38).
    pass_mcp_servers: bool,
    /// Who a root opened through an editor asks (C4).
    approver: Option<Approver>,
    /// The session's sandbox (V2), when it runs in one.
    sandbox: Option<crate::sandbox::SandboxPlan>,
    /// The uid its sandbox runs as, held as long as the driver.
    uid_lease: Option<std::sync::Arc<crate::sandbox::UidLease>>,
    /// A sandbox made ahead for this session, taken by its first start.
    warm: Option<std::sync::Arc<std::sync::Mutex<Option<WarmSandbox>>>>,
    /// The session's own directory of files (issue 39), when its workdir is per session.
    own_files: Option<crate::driver::OwnFiles>,
}

/// A hosted session's delegation tools (T1): the MCP server entry its `session/new` declares
/// (`lineage mcp` over stdio, with the grant's environment; or, to an agent that declares
/// `mcpCapabilities.http`, the node's loopback URL with the grant's bearer header) and the slot
/// through which a tool call reaches the running turn.
#[derive(Debug, Clone)]
pub struct AgentTools {
    /// The bridge the agent starts: program, then arguments (the node's `lineage mcp`).
    pub bridge: Vec<String>,
    /// The grant's environment for the bridge ([`crate::tools::socket::ToolsGrant::env`]).
    pub env: Vec<(String, String)>,
    /// The HTTP entry, when the node serves the tools over HTTP too.
    pub http: Option<crate::tools::socket::HttpEntry>,
    /// Where the running turn is, for the tools.
    pub slot: crate::tools::TurnSlot,
    /// Keeps the grant alive as long as the driver (revoked when the driver is dropped).
    pub grant: std::sync::Arc<crate::tools::socket::ToolsGrant>,
}

/// The first line of the instructions block that opens a new session's first prompt when the
/// agent takes no system prompt (C4: Codex, Gemini CLI): the delegation statement and persona
/// follow it.
pub const INSTRUCTIONS_HEADING: &str =
    "[The instructions you run under, from lineage, the system that hosts you]";

/// The name of lineage's MCP server in an agent's `mcpServers`.
pub const TOOLS_SERVER_NAME: &str = "lineage";

/// The `acp` driver: hosts one ACP agent subprocess and one ACP session in it.
#[derive(Debug)]
pub struct AcpDriver {
    settings: Settings,
    /// The hosted lineage session, for error messages ("-" before start).
    label: String,
    live: Option<Live>,
    /// The session's policy has an approval service (a root opened through an editor): its
    /// permission requests go to the approver.
    asks_person: bool,
}

/// Sends `session/cancel` for an [`AcpDriver`]'s session while a turn runs (M4). Cheap to clone.
#[derive(Debug, Clone)]
pub struct AcpCanceller {
    connection: ConnectionTo<Agent>,
    session_id: AcpSessionId,
    label: String,
}

impl AcpCanceller {
    /// Sends the `session/cancel` notification; the running turn then ends with a `Fail` action
    /// once the agent answers the prompt with stop reason `cancelled`.
    pub fn cancel(&self) -> Result<(), DriverError> {
        self.connection
            .send_notification(CancelNotification::new(self.session_id.clone()))
            .map_err(|e| DriverError::Agent {
                session: self.label.clone(),
                reason: format!(
                    "ACP agent: cannot send session/cancel: {}; check the agent command",
                    one_line(&sdk_error(&e))
                ),
            })
    }
}

impl AcpDriver {
    /// A driver that runs `command` (program, then arguments) in `cwd`. Nothing starts before
    /// [`AgentDriver::start`].
    pub fn new(command: Vec<String>, cwd: PathBuf) -> Self {
        AcpDriver {
            settings: Settings {
                command,
                cwd,
                env: None,
                init_timeout: DEFAULT_INIT_TIMEOUT,
                prompt_timeout: DEFAULT_PROMPT_TIMEOUT,
                cancel_grace: DEFAULT_CANCEL_GRACE,
                permissions: None,
                tools: None,
                modes: SessionModes::new(),
                tools_stdio: false,
                pass_mcp_servers: false,
                approver: None,
                sandbox: None,
                uid_lease: None,
                warm: None,
                own_files: None,
            },
            label: "-".into(),
            live: None,
            asks_person: false,
        }
    }

    /// Runs the agent with exactly this environment (a profile's), not the node's.
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Self {
        self.settings.env = Some(env);
        self
    }

    /// Sets the deadline for `initialize` and for opening or loading the session.
    pub fn with_init_timeout(mut self, timeout: Duration) -> Self {
        self.settings.init_timeout = timeout;
        self
    }

    /// Sets the deadline for one prompt turn.
    pub fn with_prompt_timeout(mut self, timeout: Duration) -> Self {
        self.settings.prompt_timeout = timeout;
        self
    }

    /// Sets how long [`AgentDriver::cancel`] waits for the agent to end a cancelled prompt.
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.settings.cancel_grace = grace;
        self
    }

    /// Runs the agent in `plan`'s sandbox (V2); its tools then go over the stdio bridge,
    /// whose connection is bound to the sandbox.
    pub fn with_sandbox(mut self, plan: crate::sandbox::SandboxPlan) -> Self {
        self.settings.sandbox = Some(plan);
        self.settings.tools_stdio = true;
        self
    }

    /// Starts the agent in `warm`, a sandbox made ahead (V2), instead of making one; the
    /// driver's working directory must be `warm`'s. A later start (a restart of the agent)
    /// makes its own.
    pub fn with_warm_sandbox(mut self, warm: WarmSandbox) -> Self {
        self.settings.warm = Some(std::sync::Arc::new(std::sync::Mutex::new(Some(warm))));
        self
    }

    /// `files` is the session's own directory of files (its per-session workdir) and its
    /// caps: its workspace is materialized there and checkpointed from there (issue 39).
    pub fn with_own_files(mut self, files: crate::driver::OwnFiles) -> Self {
        self.settings.own_files = Some(files);
        self
    }

    /// Holds `lease` (the uid of its sandbox) as long as the driver lives.
    pub fn with_uid_lease(mut self, lease: crate::sandbox::UidLease) -> Self {
        self.settings.uid_lease = Some(std::sync::Arc::new(lease));
        self
    }

    /// Gives the agent lineage's delegation tools: its `session/new` declares them, and a tool
    /// call acts in the turn that runs.
    pub fn with_tools(mut self, tools: AgentTools) -> Self {
        self.settings.tools = Some(tools);
        self
    }

    /// Sets how permission requests are answered (default: [`PermissionPolicy::Lineage`] with
    /// the session's tools).
    pub fn with_permission_policy(mut self, policy: PermissionPolicy) -> Self {
        self.settings.permissions = Some(policy);
        self
    }

    /// Sets the session mode for each policy (a profile's `modes`).
    pub fn with_session_modes(mut self, modes: SessionModes) -> Self {
        self.settings.modes = modes;
        self
    }

    /// Gives the agent its tools over the stdio bridge (`lineage mcp`) even when it takes HTTP.
    pub fn with_tools_over_stdio(mut self, stdio: bool) -> Self {
        self.settings.tools_stdio = stdio || self.settings.sandbox.is_some();
        self
    }

    /// Whether a root's editor's HTTP MCP servers ([`crate::driver::DriverComposition::mcp_servers`])
    /// go to the agent, next to lineage's tools (the profile's `pass_mcp_servers`, issue 38).
    pub fn with_editor_mcp_servers(mut self, pass: bool) -> Self {
        self.settings.pass_mcp_servers = pass;
        self
    }

    /// Gives the driver the person behind the session's editor, asked when the session's
    /// policy has an approval service (C4).
    pub fn with_approver(mut self, approver: Approver) -> Self {
        self.settings.approver = Some(approver);
        self
    }

    /// How this driver answers permission requests.
    fn permission_policy(&self) -> PermissionPolicy {
        self.settings
            .permissions
            .clone()
            .unwrap_or_else(|| PermissionPolicy::Lineage {
                tools: self.settings.tools.as_ref().map(|t| t.slot.clone()),
                approver: self.settings.approver.clone().filter(|_| self.asks_person),
            })
    }

    /// The agent's own session id, once started.
    pub fn acp_session_id(&self) -> Option<String> {
        self.live
            .as_ref()
            .map(|live| live.active.session_id().to_string())
    }

    /// True when the running session was restored with `session/load`.
    pub fn session_loaded(&self) -> bool {
        self.live.as_ref().is_some_and(|live| live.loaded)
    }

    /// A handle that cancels the current turn from another task; `None` before start.
    pub fn canceller(&self) -> Option<AcpCanceller> {
        self.live.as_ref().map(|live| AcpCanceller {
            connection: live.connection.clone(),
            session_id: live.active.session_id().clone(),
            label: self.label.clone(),
        })
    }

    /// A one-line driver error about this driver's agent.
    fn error(&self, what: &str) -> DriverError {
        let program = self.settings.command.first().map_or("", String::as_str);
        agent_error(&self.label, program, what)
    }

    async fn start_inner(&mut self, start: DriverStart) -> Result<(), DriverError> {
        self.label = start.session.as_str().to_string();
        self.asks_person = start.composition.approval_service;
        if self.live.is_some() {
            return Err(self.error("the agent is already started"));
        }
        self.live = Some(start::open(&self.settings, &start).await?);
        Ok(())
    }

    async fn turn_inner(
        &mut self,
        input: TurnInput,
        ctx: Option<&TurnCtx>,
    ) -> Result<Vec<DriverAction>, DriverError> {
        let (prompt_timeout, cancel_grace) =
            (self.settings.prompt_timeout, self.settings.cancel_grace);
        let permissions = self.permission_policy();
        match self.live.as_mut() {
            None => Err(self.error("the agent is not started; start the driver first")),
            Some(live) => {
                // Cancel and wind down prompts left over from an abandoned turn.
                live.cancel(cancel_grace).await;
                live.prompt(input, prompt_timeout, &permissions, ctx).await
            }
        }
    }

    async fn cancel_inner(&mut self) {
        if let Some(live) = self.live.as_mut() {
            live.cancel(self.settings.cancel_grace).await;
        }
    }

    async fn shutdown_inner(&mut self) {
        if let Some(live) = self.live.take() {
            live.shutdown().await;
        }
    }
}

impl AgentDriver for AcpDriver {
    fn own_files(&self) -> Option<crate::driver::OwnFiles> {
        self.settings.own_files.clone()
    }

    fn start<'a>(&'a mut self, start: DriverStart) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(self.start_inner(start))
    }

    fn turn<'a>(
        &'a mut self,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<Vec<DriverAction>, DriverError>> {
        Box::pin(self.turn_inner(input, None))
    }

    /// The turn runs with its context in the tools' slot, so the agent's tool calls are this
    /// turn's actions; the slot is cleared when the turn ends. The streamed reply goes to the
    /// context's output as it comes (F1).
    fn turn_with<'a>(
        &'a mut self,
        input: TurnInput,
        ctx: TurnCtx,
    ) -> BoxFuture<'a, Result<Vec<DriverAction>, DriverError>> {
        let slot = self.settings.tools.as_ref().map(|t| t.slot.clone());
        Box::pin(async move {
            if let Some(slot) = &slot {
                slot.set(ctx.clone());
            }
            let _clear = ClearOnDrop(slot);
            self.turn_inner(input, Some(&ctx)).await
        })
    }

    fn start_record(&self) -> Option<(String, Value)> {
        self.acp_session_id().map(|id| {
            (
                ACP_SESSION_EVENT.to_string(),
                serde_json::json!({ "acp_session_id": id }),
            )
        })
    }

    fn cancel<'a>(&'a mut self) -> BoxFuture<'a, ()> {
        Box::pin(self.cancel_inner())
    }

    fn shutdown<'a>(&'a mut self) -> BoxFuture<'a, ()> {
        Box::pin(self.shutdown_inner())
    }
}

/// Clears the tools' slot when the turn's future ends or is dropped (an interrupt).
struct ClearOnDrop(Option<crate::tools::TurnSlot>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        if let Some(slot) = &self.0 {
            slot.clear();
        }
    }
}
