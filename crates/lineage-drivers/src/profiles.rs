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

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use lineage_core::ids::SessionId;
use lineage_protocol::control::AgentsReply;
use serde::{Deserialize, Serialize};

use crate::driver::AgentSpec;
use crate::error::DriverError;
use crate::sandbox::{sandbox_env, Isolation, SandboxPlan, Support, SystemPath, UidRange};

pub use lineage_protocol::agent::{ProfileDriver, ProfileInfo};

/// One `[agents.<name>]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentProfile {
    /// `script` or `acp`.
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
}

/// The keys of a profile's `modes`: the policies a session can run under (C4).
pub const MODE_KEYS: [&str; 5] = [
    "root",
    "delegated",
    "read-only",
    "workspace-write",
    "danger-full-access",
];

/// Variables every ACP agent gets from the node when set there (a program needs a `PATH` to
/// find its own helpers, a home for its settings); nothing else leaks unless listed.
const BASE_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

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

    /// The sandbox of a session of `isolation` in `workdir`, when it gets one.
    fn sandbox_of(
        &self,
        isolation: Isolation,
        workdir: &Path,
        program: &str,
        read_only: &[String],
        read_write: &[String],
    ) -> Option<SandboxPlan> {
        let bwrap = match (isolation, &self.bwrap) {
            (Isolation::None, _) | (_, None) => return None,
            (Isolation::Auto | Isolation::Sandbox, Some(bwrap)) => bwrap.clone(),
        };
        let mut granted: Vec<PathBuf> = read_only.iter().map(PathBuf::from).collect();
        // The agent's own program directory, when the profile names it by path.
        if let Some(dir) = Path::new(program)
            .parent()
            .filter(|_| Path::new(program).is_absolute())
        {
            granted.push(dir.to_path_buf());
        }
        Some(SandboxPlan {
            bwrap,
            workdir: workdir.to_path_buf(),
            read_only: granted,
            read_write: read_write.iter().map(PathBuf::from).collect(),
            sockets: Vec::new(),
            uid: None,
            system: self.system.clone(),
        })
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
            })
            .collect()
    }

    /// Decides whether this node runs `spec` for `session`, and what exactly. `data_dir` is
    /// the node's data directory; `env` looks up the node's environment (passed in, so the
    /// decision stays a function of its inputs). Refusals are one-line `BadRequest`s naming
    /// the known profiles or the switch to set.
    pub fn admit(
        &self,
        spec: &AgentSpec,
        session: Option<&SessionId>,
        data_dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Admitted, DriverError> {
        match spec {
            AgentSpec::Script { script } => Ok(Admitted::Script(script.clone())),
            AgentSpec::Acp { command } => {
                check_offer(&offer_of(self), spec)?;
                if command.first().is_none_or(|p| p.trim().is_empty()) {
                    return Err(DriverError::BadRequest(
                        "the ACP agent command is empty; give a program and its arguments".into(),
                    ));
                }
                let workdir = workdir_for("session", session, data_dir);
                let sandbox = self.sandbox_of(Isolation::Auto, &workdir, &command[0], &[], &[]);
                let mut env = base_env(env);
                if sandbox.is_some() {
                    env = sandbox_env(env, false, &workdir);
                }
                Ok(Admitted::Acp(Box::new(AcpLaunch {
                    command: command.clone(),
                    env,
                    workdir,
                    prompt_timeout_ms: default_prompt_timeout_ms(),
                    tools: false,
                    modes: BTreeMap::new(),
                    tools_stdio: false,
                    sandbox,
                })))
            }
            AgentSpec::Profile { profile } => {
                check_offer(&offer_of(self), spec)?;
                let Some(p) = self.profiles.get(profile) else {
                    return Err(DriverError::Internal(format!(
                        "profile {profile:?} passed the offer check but is not configured"
                    )));
                };
                match p.driver {
                    ProfileDriver::Script => Ok(Admitted::Script(crate::script::Script::echo())),
                    ProfileDriver::Acp => {
                        let mut vars = base_env(env);
                        for name in &p.pass_env {
                            if let Some(value) = env(name) {
                                vars.insert(name.clone(), value);
                            }
                        }
                        vars.extend(p.env.clone());
                        let mut command = vec![p.command.clone()];
                        command.extend(p.args.iter().cloned());
                        let workdir = workdir_for(&p.workdir, session, data_dir);
                        let sandbox = self.sandbox_of(
                            p.isolation,
                            &workdir,
                            &p.command,
                            &p.sandbox_read_only,
                            &p.sandbox_read_write,
                        );
                        if sandbox.is_some() {
                            vars = sandbox_env(vars, p.env.contains_key("HOME"), &workdir);
                        }
                        Ok(Admitted::Acp(Box::new(AcpLaunch {
                            command,
                            env: vars,
                            workdir,
                            prompt_timeout_ms: p.prompt_timeout_ms,
                            tools: p.tools,
                            modes: p.modes.clone(),
                            // A sandboxed session's tools go over the bridge, whose connection
                            // is bound to the sandbox (V1); the HTTP endpoint cannot be.
                            tools_stdio: p.tools_transport == "stdio" || sandbox.is_some(),
                            sandbox,
                        })))
                    }
                }
            }
        }
    }
}

/// Whether a node with `offer` runs `spec`: the same refusals as [`AgentProfiles::admit`],
/// from what a node advertises (its `agents` reply), so a spawn can check a remote target
/// before the birth is registered.
pub fn check_offer(offer: &AgentsReply, spec: &AgentSpec) -> Result<(), DriverError> {
    let known = || {
        if offer.profiles.is_empty() {
            "none".to_owned()
        } else {
            offer
                .profiles
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    match spec {
        AgentSpec::Script { .. } => Ok(()),
        AgentSpec::Acp { .. } if offer.allow_raw_commands => Ok(()),
        AgentSpec::Acp { .. } => Err(DriverError::BadRequest(format!(
            "raw agent command lines are refused on this node; name a profile instead (known: {}), or set agents.allow_raw_commands = true (development only)",
            known()
        ))),
        AgentSpec::Profile { profile } if offer.profiles.iter().any(|p| &p.name == profile) => {
            Ok(())
        }
        AgentSpec::Profile { profile } => Err(DriverError::BadRequest(format!(
            "unknown agent profile {profile:?}; this node offers: {} (see `lineage agents`)",
            known()
        ))),
    }
}

/// The offer of a node with these profiles (its `agents` reply, without the node id).
pub fn offer_of(profiles: &AgentProfiles) -> AgentsReply {
    AgentsReply {
        node: None,
        allow_raw_commands: profiles.allow_raw_commands,
        profiles: profiles.infos(),
    }
}

fn base_env(env: &dyn Fn(&str) -> Option<String>) -> BTreeMap<String, String> {
    BASE_ENV
        .iter()
        .filter_map(|k| env(k).map(|v| ((*k).to_owned(), v)))
        .collect()
}

/// The working directory a policy gives: `session` → `<data_dir>/work/<session>` (or
/// `<data_dir>/work` before a session exists), `data_dir`, or the operator's absolute path.
fn workdir_for(policy: &str, session: Option<&SessionId>, data_dir: &Path) -> PathBuf {
    match policy {
        "session" => match session {
            Some(s) => data_dir.join("work").join(s.as_str()),
            None => data_dir.join("work"),
        },
        "data_dir" => data_dir.to_path_buf(),
        absolute => PathBuf::from(absolute),
    }
}

/// A request's `cwd` (the seed's header field) as a path under a profile's working directory:
/// relative, without `..`; `None` when the request names none.
pub fn request_subdir(cwd: Option<&str>) -> Result<Option<PathBuf>, DriverError> {
    let Some(cwd) = cwd else { return Ok(None) };
    let path = Path::new(cwd);
    let ok = !cwd.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(Some(path.to_path_buf()))
    } else {
        Err(DriverError::BadRequest(format!(
            "cwd {cwd:?} is refused: a request may only name a relative directory without '..' under the profile's working directory (the node's operator chooses that)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acp(command: &str) -> AgentProfile {
        AgentProfile {
            driver: ProfileDriver::Acp,
            command: command.into(),
            args: vec!["--stdio".into(), "two words".into()],
            env: BTreeMap::from([("MODE".into(), "test".into())]),
            pass_env: vec!["API_KEY".into()],
            ..AgentProfile::script("")
        }
    }

    fn profiles() -> AgentProfiles {
        let mut p = AgentProfiles::default();
        p.profiles.insert("agent".into(), acp("/usr/bin/agent"));
        p
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "PATH" => Some("/usr/bin".into()),
            "API_KEY" => Some("k".into()),
            "SECRET_OF_THE_NODE" => Some("s".into()),
            _ => None,
        }
    }

    #[test]
    fn t4_a_profile_runs_exactly_what_the_operator_wrote() {
        let session = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap();
        let spec = AgentSpec::Profile {
            profile: "agent".into(),
        };
        let Admitted::Acp(launch) = profiles()
            .admit(&spec, Some(&session), Path::new("/data"), &env)
            .unwrap()
        else {
            panic!("not acp")
        };
        assert_eq!(launch.command, ["/usr/bin/agent", "--stdio", "two words"]);
        assert_eq!(
            launch.workdir,
            Path::new("/data/work/01936c1e-7a3b-7cde-8f00-000000000001")
        );
        assert_eq!(launch.env.get("API_KEY").map(String::as_str), Some("k"));
        assert_eq!(launch.env.get("MODE").map(String::as_str), Some("test"));
        assert!(!launch.env.contains_key("SECRET_OF_THE_NODE"));
    }

    #[test]
    fn t4_unknown_profiles_and_raw_commands_are_refused_with_the_known_names() {
        let p = profiles();
        let err = p
            .admit(
                &AgentSpec::Profile {
                    profile: "nope".into(),
                },
                None,
                Path::new("/d"),
                &env,
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"nope\"") && err.contains("agent, script"),
            "{err}"
        );
        let raw = AgentSpec::Acp {
            command: vec!["sh".into(), "-c".into(), "id > proof.txt".into()],
        };
        let err = p
            .admit(&raw, None, Path::new("/d"), &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("agents.allow_raw_commands"), "{err}");
        assert!(!err.contains('\n'));
        let mut dev = p.clone();
        dev.allow_raw_commands = true;
        assert!(matches!(
            dev.admit(&raw, None, Path::new("/d"), &env),
            Ok(Admitted::Acp(_))
        ));
    }

    #[test]
    fn t4_invalid_profiles_are_refused_naming_the_key() {
        let cases: Vec<(AgentProfile, &str)> = vec![
            (acp(""), "agents.x.command"),
            (acp("my agent"), "agents.x.command"),
            (
                AgentProfile {
                    workdir: "relative/dir".into(),
                    ..acp("/bin/a")
                },
                "agents.x.workdir",
            ),
            (
                AgentProfile {
                    prompt_timeout_ms: 0,
                    ..acp("/bin/a")
                },
                "agents.x.prompt_timeout_ms",
            ),
            (
                AgentProfile {
                    modes: BTreeMap::from([("sometimes".into(), "default".into())]),
                    ..acp("/bin/a")
                },
                "agents.x.modes",
            ),
            (
                AgentProfile {
                    modes: BTreeMap::from([("delegated".into(), " ".into())]),
                    ..acp("/bin/a")
                },
                "agents.x.modes",
            ),
            (
                AgentProfile {
                    command: "/bin/sh".into(),
                    ..AgentProfile::script("")
                },
                "agents.x.command",
            ),
        ];
        for (profile, key) in cases {
            let mut p = AgentProfiles::default();
            p.profiles.insert("x".into(), profile);
            let (k, _) = p.validate().unwrap_err();
            assert_eq!(k, key);
        }
        let mut p = AgentProfiles::default();
        p.profiles.insert("bad name".into(), acp("/bin/a"));
        assert!(p.validate().is_err());
    }

    #[test]
    fn v2_isolation_is_resolved_once_never_silently_downgraded() {
        let missing = Support::Missing("bubblewrap (bwrap) is not on the node's PATH".into());
        let available = Support::Available {
            bwrap: "/usr/bin/bwrap".into(),
            system: Vec::new(),
        };
        // sandbox on a node that cannot: the start is refused, naming the key and the reason.
        let mut p = profiles();
        p.profiles.get_mut("agent").unwrap().isolation = Isolation::Sandbox;
        let (key, why) = p.resolve_isolation(&missing, 1000).unwrap_err();
        assert_eq!(key, "agents.agent.isolation");
        assert!(why.contains("bubblewrap") && !why.contains('\n'), "{why}");
        // auto on a node that cannot: runs without, and says so.
        let mut p = profiles();
        let said = p.resolve_isolation(&missing, 1000).unwrap();
        assert!(
            said[0].contains("agents agent") && said[0].contains("without a sandbox"),
            "{said:?}"
        );
        let session = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap();
        let spec = AgentSpec::Profile {
            profile: "agent".into(),
        };
        let Ok(Admitted::Acp(launch)) = p.admit(&spec, Some(&session), Path::new("/d"), &env)
        else {
            panic!("not acp")
        };
        assert_eq!(launch.sandbox, None);
        // auto on a node that can: a sandbox, its tools over the bridge, HOME its workdir.
        let mut p = profiles();
        assert!(p.resolve_isolation(&available, 1000).unwrap().is_empty());
        let Ok(Admitted::Acp(launch)) = p.admit(&spec, Some(&session), Path::new("/d"), &env)
        else {
            panic!("not acp")
        };
        let plan = launch.sandbox.expect("sandboxed");
        assert_eq!(plan.workdir, launch.workdir);
        assert!(
            plan.read_only.contains(&PathBuf::from("/usr/bin")),
            "the command's directory"
        );
        assert!(launch.tools_stdio);
        assert_eq!(launch.env["HOME"], launch.workdir.display().to_string());
        // sandbox_uids: only on a node that may switch uids; a root node without is told.
        let mut p = profiles();
        p.sandbox_uids = Some(UidRange {
            first: 200000,
            last: 200009,
        });
        let (key, _) = p.resolve_isolation(&available, 1000).unwrap_err();
        assert_eq!(key, "agents.sandbox_uids");
        assert!(p.resolve_isolation(&available, 0).unwrap().is_empty());
        let said = profiles().resolve_isolation(&available, 0).unwrap();
        assert!(said[0].contains("agents.sandbox_uids"), "{said:?}");
    }

    #[test]
    fn t4_a_request_cannot_pick_the_root_or_escape_the_workdir() {
        for bad in ["/", "/etc", "../x", "a/../../b", ""] {
            assert!(request_subdir(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(
            request_subdir(Some("repo/sub")).unwrap(),
            Some(PathBuf::from("repo/sub"))
        );
        assert_eq!(request_subdir(None).unwrap(), None);
    }
}
