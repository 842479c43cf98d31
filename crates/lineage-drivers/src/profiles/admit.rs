//! Admission (T4, V2): what this node runs for a spec ([`AgentProfiles::admit`]), the same
//! refusals from what a node advertises ([`check_offer`], [`offer_of`]), the session's sandbox
//! and environment, and a request's `cwd` ([`request_subdir`]).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use lineage_core::ids::SessionId;
use lineage_protocol::control::AgentsReply;

use super::{default_prompt_timeout_ms, AcpLaunch, Admitted, AgentProfiles, ProfileDriver};
use crate::driver::AgentSpec;
use crate::error::DriverError;
use crate::sandbox::{sandbox_env, Isolation, SandboxPlan};

/// Variables every ACP agent gets from the node when set there (a program needs a `PATH` to
/// find its own helpers, a home for its settings); nothing else leaks unless listed.
const BASE_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

impl AgentProfiles {
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
                    workspace_caps: Default::default(),
                    workspace_uploads: true,
                    pass_mcp_servers: false,
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
                    ProfileDriver::A2a => {
                        let token = match &p.bearer_env {
                            None => None,
                            Some(name) => Some(env(name).ok_or_else(|| {
                                DriverError::Unavailable(format!(
                                    "a2a (profile {profile:?} takes its bearer token from {name}, which is not set on this node)"
                                ))
                            })?),
                        };
                        Ok(Admitted::A2a(Box::new(crate::a2a::A2aLaunch {
                            url: p.url.clone().unwrap_or_default(),
                            token,
                            prompt_timeout_ms: p.prompt_timeout_ms,
                        })))
                    }
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
                            workspace_caps: p.workspace_caps(),
                            workspace_uploads: p.workspace_uploads,
                            pass_mcp_servers: p.pass_mcp_servers,
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
