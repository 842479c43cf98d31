//! Agent profiles (T4): what a node is willing to run, named in its config, never taken from
//! the wire.
//!
//! A session names a profile (`{"driver":"profile","profile":"acp-testagent"}`); the node
//! that hosts it looks the name up in its own `[agents.<name>]` tables and runs the program,
//! arguments, environment and working directory the operator wrote there. A raw command line
//! from a request (`{"driver":"acp","command":[...]}`) is refused unless the node sets
//! `agents.allow_raw_commands = true` (development only). Inline scripts
//! (`{"driver":"script",...}`) run no process and are always accepted.
//!
//! [`AgentProfiles::admit`] is the one decision: may this node run this spec, and if so what
//! exactly ([`Admitted`]). It is pure: the node's driver factory executes its answer.
//!
//! | file | what |
//! |---|---|
//! | `profiles.rs` | the `[agents]` section and its profiles, validation, isolation resolved at start |
//! | `profiles/admit.rs` | admission: [`AgentProfiles::admit`], [`check_offer`], [`offer_of`], [`request_subdir`], a session's sandbox and environment |
//! | `profiles/tests.rs` | unit tests |

mod admit;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sandbox::{Isolation, SandboxPlan, Support, SystemPath, UidRange};

pub use admit::{check_offer, offer_of, request_subdir};
pub use lineage_protocol::agent::{ProfileDriver, ProfileInfo};

/// One `[agents.<name>]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentProfile {
    /// `script`, `acp` or `a2a`.
    pub driver: ProfileDriver,
    /// The program (an absolute path or a name on the node's `PATH`); ACP only.
    #[serde(default)]
    pub command: String,
    /// Its arguments, as a list (never split on whitespace).
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment set for the agent process: `NAME = "value"`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of the node's environment variables passed through to the agent (API keys).
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Working directory policy: `session` (`<data_dir>/work/<session>`, the default),
    /// `data_dir`, or an absolute directory chosen by the operator.
    #[serde(default = "default_workdir")]
    pub workdir: String,
    /// Deadline of one prompt turn, in milliseconds.
    #[serde(default = "default_prompt_timeout_ms")]
    pub prompt_timeout_ms: u64,
    /// Whether the agent gets lineage's delegation tools (T1).
    #[serde(default)]
    pub tools: bool,
    /// The ACP session mode a session runs in, by its policy (C4): keys `root`, `delegated`,
    /// `read-only`, `workspace-write`, `danger-full-access`; values are modes the agent offers
    /// (`session/new`'s `modes`). A policy without a key keeps the agent's default mode.
    #[serde(default)]
    pub modes: BTreeMap<String, String>,
    /// How the agent reaches its tools: `auto` (the default: the node's loopback HTTP endpoint
    /// when the agent declares `mcpCapabilities.http`, else the stdio bridge `lineage mcp`) or
    /// `stdio` (always the bridge).
    #[serde(default = "default_tools_transport")]
    pub tools_transport: String,
    /// Whether the agent runs in a sandbox of its own (V2, [`crate::sandbox`]): `auto` (the
    /// default: when the node can make one), `sandbox` (always; a node that cannot refuses to
    /// start) or `none`.
    #[serde(default)]
    pub isolation: Isolation,
    /// Absolute paths the sandbox shows the agent read only, besides the system's toolchain
    /// (its installation, a settings directory).
    #[serde(default)]
    pub sandbox_read_only: Vec<String>,
    /// Absolute paths the sandbox shows the agent read-write (shared by every session of the
    /// profile: grant nothing a session must not see of another).
    #[serde(default)]
    pub sandbox_read_write: Vec<String>,
    /// A line for `lineage agents`.
    #[serde(default)]
    pub description: String,
    /// The most bytes of file content a session's workspace may hold (issue 39): its upload,
    /// its copy of its parent's files, each checkpoint. 256 MiB when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_max_bytes: Option<u64>,
    /// The most entries (files, directories, links) a session's workspace may hold. 100,000
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_max_files: Option<u64>,
    /// Whether a root of this profile may start in files a client uploads (`lineage spawn
    /// --workspace DIR`, `lineage acp --project`). True when absent; false keeps a client's
    /// files off its agents (a node's `--git` clone and a child's inherited copy still work).
    #[serde(default = "yes")]
    pub workspace_uploads: bool,
    /// Whether `lineage a2a` offers this profile as an A2A agent, with its card (A1). False
    /// when absent: nothing is reachable over A2A unless the operator says so.
    #[serde(default)]
    pub a2a: bool,
    /// An `a2a` profile's remote agent: its base URL (`http://...`; its card is at
    /// `<url>/.well-known/agent-card.json`). The operator's choice, never a request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The name of the node's environment variable holding the bearer token an `a2a` profile's
    /// remote agent wants (read when a session starts; never logged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_env: Option<String>,
    /// Whether a root opened through an editor (`lineage acp`) also gets the editor's MCP
    /// servers that are reached over HTTP, next to lineage's tools (issue 38). False when
    /// absent: an agent reaches only what the operator gave it.
    #[serde(default)]
    pub pass_mcp_servers: bool,
}

fn yes() -> bool {
    true
}

fn default_git_protocols() -> Vec<String> {
    crate::git::DEFAULT_PROTOCOLS
        .iter()
        .map(|p| (*p).to_owned())
        .collect()
}

fn default_workdir() -> String {
    "session".into()
}

fn default_tools_transport() -> String {
    "auto".into()
}

fn default_prompt_timeout_ms() -> u64 {
    600_000
}

impl AgentProfile {
    /// What a session's workspace may hold: the profile's caps, the defaults where it sets
    /// none (issue 39).
    pub fn workspace_caps(&self) -> lineage_workspace::Caps {
        let default = lineage_workspace::Caps::default();
        lineage_workspace::Caps {
            max_bytes: self.workspace_max_bytes.unwrap_or(default.max_bytes),
            max_files: self.workspace_max_files.unwrap_or(default.max_files),
        }
    }

    /// A scripted-agent profile (the request carries the script).
    pub fn script(description: &str) -> Self {
        AgentProfile {
            driver: ProfileDriver::Script,
            command: String::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            pass_env: Vec::new(),
            workdir: default_workdir(),
            prompt_timeout_ms: default_prompt_timeout_ms(),
            tools: false,
            modes: BTreeMap::new(),
            tools_transport: default_tools_transport(),
            isolation: Isolation::Auto,
            sandbox_read_only: Vec::new(),
            sandbox_read_write: Vec::new(),
            description: description.to_owned(),
            workspace_max_bytes: None,
            workspace_max_files: None,
            workspace_uploads: true,
            a2a: false,
            url: None,
            bearer_env: None,
            pass_mcp_servers: false,
        }
    }
}

/// The `[agents]` section: the raw-command switch and the profiles by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentProfiles {
    /// Accept raw ACP command lines from requests (development only).
    #[serde(default)]
    pub allow_raw_commands: bool,
    /// The uids (`"FIRST-LAST"`) a node that may switch uids (root) runs its sandboxes as, one
    /// per live session (V2). Unset: sandboxes run as the node's own user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_uids: Option<UidRange>,
    /// The protocols a root's `--git` URL may use (issue 39): default `https` and `ssh`; `file`
    /// lets clients clone the node's own local repositories.
    #[serde(default = "default_git_protocols")]
    pub git_protocols: Vec<String>,
    /// The profiles, by name.
    #[serde(flatten)]
    pub profiles: BTreeMap<String, AgentProfile>,
    /// The bubblewrap this node makes sandboxes with, once
    /// [`AgentProfiles::resolve_isolation`] found it can (not config).
    #[serde(skip)]
    pub bwrap: Option<PathBuf>,
    /// The system's paths as this node shows them in a sandbox (not config).
    #[serde(skip)]
    pub system: Vec<SystemPath>,
}

impl Default for AgentProfiles {
    fn default() -> Self {
        AgentProfiles {
            allow_raw_commands: false,
            git_protocols: default_git_protocols(),
            profiles: BTreeMap::from([(
                "script".to_owned(),
                AgentProfile::script("scripted agent: the request carries the script"),
            )]),
            bwrap: None,
            system: Vec::new(),
            sandbox_uids: None,
        }
    }
}

/// What [`AgentProfiles::admit`] decided a node runs for a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// The scripted agent with this script.
    Script(crate::script::Script),
    /// An ACP subprocess (boxed: a launch is much larger than a script).
    Acp(Box<AcpLaunch>),
    /// A remote A2A agent.
    A2a(Box<crate::a2a::A2aLaunch>),
}

/// Exactly what to run for an ACP agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpLaunch {
    /// Program, then arguments.
    pub command: Vec<String>,
    /// Environment of the process (only these variables).
    pub env: BTreeMap<String, String>,
    /// Working directory (created by the driver factory when it is the session's own).
    pub workdir: PathBuf,
    /// Deadline of one prompt turn.
    pub prompt_timeout_ms: u64,
    /// Whether the agent gets the delegation tools.
    pub tools: bool,
    /// The session mode by policy (C4).
    pub modes: BTreeMap<String, String>,
    /// Whether the tools go over the stdio bridge even to an agent that takes HTTP.
    pub tools_stdio: bool,
    /// The session's sandbox (V2), when it runs in one; the node adds its tools socket and
    /// bridge.
    pub sandbox: Option<SandboxPlan>,
    /// What its workspace may hold (issue 39).
    pub workspace_caps: lineage_workspace::Caps,
    /// Whether a root may start in a client's upload (the profile's `workspace_uploads`).
    pub workspace_uploads: bool,
    /// Whether a root gets its editor's HTTP MCP servers (the profile's `pass_mcp_servers`).
    pub pass_mcp_servers: bool,
}

/// The keys of a profile's `modes`: the policies a session can run under (C4).
pub const MODE_KEYS: [&str; 5] = [
    "root",
    "delegated",
    "read-only",
    "workspace-write",
    "danger-full-access",
];

impl AgentProfiles {
    /// Refuses a section that cannot work, naming the key: a profile name that is not a
    /// subject-safe token, an ACP profile without a command, a script profile with one, a
    /// workdir that is neither `session`, `data_dir` nor an absolute path, a bad env name, a
    /// zero prompt timeout.
    pub fn validate(&self) -> Result<(), (String, String)> {
        for (name, p) in &self.profiles {
            let key = |k: &str| format!("agents.{name}.{k}");
            if name.is_empty()
                || name.len() > 64
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err((
                    format!("agents.{name}"),
                    "a profile name is letters, digits, '-' and '_' (at most 64)".into(),
                ));
            }
            match p.driver {
                ProfileDriver::Acp if p.command.trim().is_empty() => {
                    return Err((
                        key("command"),
                        "an acp profile needs the program to run (absolute path or a name on PATH)".into(),
                    ))
                }
                ProfileDriver::Script if !p.command.is_empty() || !p.args.is_empty() => {
                    return Err((
                        key("command"),
                        "a script profile runs no program; remove command/args or use driver = \"acp\"".into(),
                    ))
                }
                ProfileDriver::A2a => crate::a2a::check_profile(p).map_err(|(k, why)| (key(k), why))?,
                ProfileDriver::Script | ProfileDriver::Acp
                    if p.url.is_some() || p.bearer_env.is_some() =>
                {
                    return Err((
                        key("url"),
                        "url and bearer_env name a remote agent: they are for driver = \"a2a\" profiles".into(),
                    ))
                }
                _ => {}
            }
            if p.command.contains(char::is_whitespace) && !Path::new(&p.command).is_absolute() {
                return Err((
                    key("command"),
                    format!(
                        "{:?} has whitespace: command is one program; put its arguments in args = [...]",
                        p.command
                    ),
                ));
            }
            if !matches!(p.workdir.as_str(), "session" | "data_dir")
                && !Path::new(&p.workdir).is_absolute()
            {
                return Err((
                    key("workdir"),
                    format!(
                        "{:?} is not \"session\", \"data_dir\" or an absolute directory",
                        p.workdir
                    ),
                ));
            }
            for var in p.env.keys().chain(p.pass_env.iter()) {
                if var.is_empty() || var.contains('=') || var.contains('\0') {
                    return Err((
                        key("env"),
                        format!("{var:?} is not an environment variable name"),
                    ));
                }
            }
            if p.prompt_timeout_ms == 0 {
                return Err((key("prompt_timeout_ms"), "must be above 0".into()));
            }
            if p.workspace_max_bytes == Some(0) {
                return Err((
                    key("workspace_max_bytes"),
                    "must be above 0 (leave it out for 256 MiB)".into(),
                ));
            }
            if p.workspace_max_files == Some(0) {
                return Err((
                    key("workspace_max_files"),
                    "must be above 0 (leave it out for 100000)".into(),
                ));
            }
            for path in p.sandbox_read_only.iter().chain(&p.sandbox_read_write) {
                if !Path::new(path).is_absolute() {
                    return Err((
                        key("sandbox_read_only"),
                        format!("{path:?} is not an absolute path; the sandbox grants absolute paths only"),
                    ));
                }
            }
            if !matches!(p.tools_transport.as_str(), "auto" | "stdio") {
                return Err((
                    key("tools_transport"),
                    format!("{:?} is not \"auto\" or \"stdio\"", p.tools_transport),
                ));
            }
            for (policy, mode) in &p.modes {
                if !MODE_KEYS.contains(&policy.as_str()) {
                    return Err((
                        key("modes"),
                        format!("{policy:?} is not a policy; use {}", MODE_KEYS.join(", ")),
                    ));
                }
                if mode.trim().is_empty() || p.driver != ProfileDriver::Acp {
                    return Err((
                        key("modes"),
                        format!(
                            "modes.{policy} must name a session mode the ACP agent offers (an acp profile only)"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks, once at the node's start, that every `a2a` profile's `bearer_env` is set in the
    /// node's environment (`env`), so a missing secret stops the node with the key and one
    /// line rather than failing each birth of the profile.
    pub fn check_secrets(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), (String, String)> {
        for (name, p) in &self.profiles {
            if let (ProfileDriver::A2a, Some(var)) = (p.driver, &p.bearer_env) {
                if env(var).is_none_or(|v| v.trim().is_empty()) {
                    return Err((
                        format!("agents.{name}.bearer_env"),
                        format!("{var} is not set in this node's environment; set it to the remote agent's token (a Secret), or remove bearer_env"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Decides, once at the node's start, how the profiles' `isolation` is met with what the
    /// node can do (`support`, [`crate::sandbox::probe`]): a profile that asks for a sandbox
    /// the node cannot make refuses the start (the key and one line naming the missing
    /// capability; never a silent downgrade); `auto` profiles run without one, and the
    /// returned line says so (for the node's log). `agents.sandbox_uids` needs a node that may
    /// switch uids (`euid` 0); a root node without it is told that its sandboxes run as root
    /// outside their namespaces. Afterwards [`AgentProfiles::admit`] sandboxes every session it
    /// may.
    pub fn resolve_isolation(
        &mut self,
        support: &Support,
        euid: u32,
    ) -> Result<Vec<String>, (String, String)> {
        if let (Some(range), true) = (self.sandbox_uids, euid != 0) {
            return Err((
                "agents.sandbox_uids".into(),
                format!(
                    "{} needs a node that may switch uids (root); this node runs as uid {euid}: remove the key, or run the node as root",
                    String::from(range)
                ),
            ));
        }
        let said = self.resolve_support(support)?;
        let mut lines: Vec<String> = said.into_iter().collect();
        if euid == 0 && self.sandbox_uids.is_none() && self.bwrap.is_some() {
            lines.push("the node runs as root and agents.sandbox_uids is not set: its sandboxes run as root outside their namespaces (they still see only their own processes and files); set agents.sandbox_uids = \"FIRST-LAST\" to give each session a uid of its own".into());
        }
        Ok(lines)
    }

    fn resolve_support(&mut self, support: &Support) -> Result<Option<String>, (String, String)> {
        let acp = || {
            self.profiles
                .iter()
                .filter(|(_, p)| p.driver == ProfileDriver::Acp)
        };
        match support {
            Support::Available { bwrap, system } => {
                self.bwrap = Some(bwrap.clone());
                self.system = system.clone();
                Ok(None)
            }
            Support::Missing(why) => {
                if let Some((name, _)) = acp().find(|(_, p)| p.isolation == Isolation::Sandbox) {
                    return Err((
                        format!("agents.{name}.isolation"),
                        format!("profile {name} asks for isolation = \"sandbox\" but this node cannot make one: {why}; or set isolation = \"none\" knowingly"),
                    ));
                }
                self.bwrap = None;
                let unsandboxed: Vec<&str> = acp()
                    .filter(|(_, p)| p.isolation == Isolation::Auto)
                    .map(|(n, _)| n.as_str())
                    .collect();
                let raw = if self.allow_raw_commands {
                    " (and raw commands)"
                } else {
                    ""
                };
                Ok((!unsandboxed.is_empty() || self.allow_raw_commands).then(|| {
                    format!(
                        "agents {}{raw} run without a sandbox, as the node's user, able to reach each other: {why}",
                        unsandboxed.join(", ")
                    )
                }))
            }
        }
    }

    /// The profiles as `lineage agents` lists them, by name.
    pub fn infos(&self) -> Vec<ProfileInfo> {
        self.profiles
            .iter()
            .map(|(name, p)| ProfileInfo {
                name: name.clone(),
                driver: p.driver,
                tools: p.tools,
                description: p.description.clone(),
                a2a: p.a2a,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
