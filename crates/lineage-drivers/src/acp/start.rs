//! Starting an agent: spawn the program, connect over its stdio, `initialize`, then open the
//! ACP session (`session/load` on a cold resume when the agent can, else `session/new` and the
//! log replayed as context in the first prompt). Each step has the init deadline.

use std::path::PathBuf;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ContentBlock, EnvVariable, HttpHeader, Implementation, InitializeRequest, LoadSessionRequest,
    McpServer, McpServerHttp, McpServerStdio, NewSessionRequest, SessionModeState,
    SetSessionModeRequest, SystemPrompt,
};
use agent_client_protocol::v1::{ActiveSession, ConnectionTo, SessionMessage};
use agent_client_protocol::{Agent, ByteStreams, Client};
use futures::FutureExt;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use super::live::{absorb, Live};
use super::process::{Process, Spawned};
use super::text::{agent_error, one_line, recorded_session, render_history, sdk_error};
use super::{PermissionPolicy, Settings};
use crate::driver::{DriverComposition, DriverStart};
use crate::error::DriverError;

/// The name the driver gives itself in `initialize` and on the connection.
const CLIENT_NAME: &str = "lineage-host";

/// Starts the agent of `settings` for `start` and opens its session.
pub(super) async fn open(settings: &Settings, start: &DriverStart) -> Result<Live, DriverError> {
    let session = start.session.as_str().to_string();
    let Some(program) = settings.command.first().cloned() else {
        return Err(DriverError::BadRequest(
            "the ACP agent command is empty; give a program and its arguments".into(),
        ));
    };
    let error = |what: &str| agent_error(&session, &program, what);
    let cwd = working_dir(settings, &error)?;
    // The request's directory under the working directory (`lineage acp --map-cwd`, a spawn's
    // `cwd`): it must be there.
    let cwd = match &start.composition.cwd {
        None => cwd,
        Some(sub) => {
            let dir = cwd.join(sub);
            if !dir.is_dir() {
                return Err(DriverError::BadRequest(format!(
                    "the session's directory {} is not a directory on this node; create it under the profile's working directory or name another",
                    dir.display()
                )));
            }
            // A link inside the working directory may not lead the agent out of it.
            let inside = match (dir.canonicalize(), cwd.canonicalize()) {
                (Ok(real), Ok(base)) => real.starts_with(base),
                _ => false,
            };
            if !inside {
                return Err(DriverError::BadRequest(format!(
                    "the session's directory {} leads out of the profile's working directory {} (a link); name a directory inside it",
                    dir.display(),
                    cwd.display()
                )));
            }
            dir
        }
    };

    let Spawned {
        mut process,
        stdin,
        stdout,
    } = spawn(settings, &cwd, &session).await?;
    // V1: the session's tools serve only its own processes (its sandbox, else its tree).
    if let (Some(tools), Some(confinement)) = (&settings.tools, process.confinement()) {
        tools.grant.bind(confinement);
    }

    let (cx_tx, cx_rx) = tokio::sync::oneshot::channel::<ConnectionTo<Agent>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let transport = ByteStreams::new(stdin.compat_write(), stdout.compat());
    let connection = Client.v1().name(CLIENT_NAME).connect_with(
        transport,
        async move |cx: ConnectionTo<Agent>| {
            drop(cx_tx.send(cx));
            drop(stop_rx.await);
            Ok(())
        },
    );
    let label = session.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(session = %label, error = %sdk_error(&e), "ACP connection ended");
        }
    });
    let Ok(cx) = cx_rx.await else {
        let detail = process.exit_detail().await;
        return Err(error(&format!(
            "the connection ended before it started{detail}"
        )));
    };

    // Initialize, with a deadline.
    let request = InitializeRequest::new(ProtocolVersion::V1)
        .client_info(Implementation::new(CLIENT_NAME, env!("CARGO_PKG_VERSION")));
    let init = tokio::time::timeout(settings.init_timeout, cx.send_request(request).block_task());
    let response = match init.await {
        Err(_) => {
            return Err(error(&format!(
                "it did not answer initialize within {} ms",
                settings.init_timeout.as_millis()
            )))
        }
        Ok(Err(e)) => {
            let detail = process.exit_detail().await;
            return Err(error(&format!(
                "initialize failed: {}{detail}",
                sdk_error(&e)
            )));
        }
        Ok(Ok(response)) => response,
    };
    if response.protocol_version != ProtocolVersion::V1 {
        return Err(error(&format!(
            "it speaks ACP protocol version {}, lineage speaks version 1",
            response.protocol_version
        )));
    }
    let can_load = response.agent_capabilities.load_session;
    // C4: the delegation statement and persona go into the agent's system prompt when it takes
    // one (`sessionCapabilities.systemPrompt`, appended to its own); otherwise they open the
    // first prompt of each new session (a loaded session has them in its history).
    let instructions = Instructions {
        text: start.composition.instructions(),
        system_prompt: response
            .agent_capabilities
            .session_capabilities
            .system_prompt
            .is_some(),
    };
    // C1, C4: the tools this session may use, set before the agent connects to them.
    if let Some(tools) = &settings.tools {
        tools
            .slot
            .set_tool_filter(start.composition.tool_filter.clone());
    }
    let transport = if response.agent_capabilities.mcp_capabilities.http && !settings.tools_stdio {
        ToolsTransport::Http
    } else {
        ToolsTransport::Stdio
    };
    let editor = editor_servers(
        settings,
        &start.composition,
        response.agent_capabilities.mcp_capabilities.http,
        &session,
    );

    // Open the session: load it on a cold resume when possible, else a new one.
    let recorded = if start.resumed {
        recorded_session(&start.log)
    } else {
        None
    };
    let loaded = match (can_load, recorded) {
        (true, Some(id)) => {
            load(
                settings,
                transport,
                &editor,
                &instructions,
                &cx,
                &cwd,
                &session,
                id,
            )
            .await
        }
        _ => None,
    };
    let was_loaded = loaded.is_some();
    let (session_handle, modes) = match loaded {
        Some(loaded) => loaded,
        None => {
            let new = cx
                .build_session_from(new_session(
                    settings,
                    transport,
                    &editor,
                    &instructions,
                    &cwd,
                ))
                .block_task()
                .start_session();
            match tokio::time::timeout(settings.init_timeout, new).await {
                Ok(Ok(setup)) => (setup.session, setup.response.modes),
                Ok(Err(e)) => {
                    let detail = process.exit_detail().await;
                    return Err(error(&format!(
                        "session/new failed: {}{detail}",
                        sdk_error(&e)
                    )));
                }
                Err(_) => {
                    return Err(error(&format!(
                        "it did not answer session/new within {} ms",
                        settings.init_timeout.as_millis()
                    )))
                }
            }
        }
    };
    // C4: the session mode its policy asks for, set on the new or loaded session.
    if let Err(e) = set_mode(settings, &start.composition, &cx, &session_handle, modes).await {
        let detail = process.exit_detail().await;
        return Err(error(&format!("{e}{detail}")));
    }
    let history = if start.resumed && !was_loaded {
        render_history(&start.log)
    } else {
        None
    };
    // A new session of an agent without a system prompt hears the instructions first.
    let preamble = match (was_loaded, instructions.system_prompt, &instructions.text) {
        (false, false, Some(text)) => Some(format!("{}\n{text}", super::INSTRUCTIONS_HEADING)),
        _ => None,
    };
    let replay = match (preamble, history) {
        (Some(p), Some(h)) => Some(format!("{p}\n\n{h}")),
        (p, h) => p.or(h),
    };
    tracing::info!(
        session = %session,
        acp_session = %session_handle.session_id(),
        resumed = start.resumed,
        loaded = was_loaded,
        "ACP agent started"
    );
    Ok(Live {
        session: session.clone(),
        program,
        process,
        connection: cx,
        active: session_handle,
        stop: Some(stop_tx),
        task,
        unanswered: 0,
        replay,
        loaded: was_loaded,
    })
}

/// How the agent reaches lineage's tools: what its `initialize` answer declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolsTransport {
    /// Every agent supports stdio: it starts `lineage mcp`.
    Stdio,
    /// The agent declared `mcpCapabilities.http`: the node's loopback URL, when it serves one.
    Http,
}

/// The session's instructions (C4) and whether the agent takes a system prompt.
struct Instructions {
    text: Option<String>,
    system_prompt: bool,
}

impl Instructions {
    /// The `systemPrompt` of `session/new` and `session/load`: appended to the agent's own.
    fn system_prompt(&self) -> Option<SystemPrompt> {
        match (self.system_prompt, &self.text) {
            (true, Some(text)) => Some(SystemPrompt::new(vec![ContentBlock::from(text.clone())])),
            _ => None,
        }
    }
}

/// `session/new` in `cwd`, declaring lineage's tools when the session has them, with the
/// session's instructions as system prompt when the agent takes one.
fn new_session(
    settings: &Settings,
    transport: ToolsTransport,
    editor: &[McpServer],
    instructions: &Instructions,
    cwd: &std::path::Path,
) -> NewSessionRequest {
    NewSessionRequest::new(cwd)
        .mcp_servers(session_servers(settings, transport, editor))
        .system_prompt(instructions.system_prompt())
}

/// Sets the session mode the profile names for the session's policy, when it names one: one
/// the agent offers, or the start fails with one line listing those it offers (never a silent
/// downgrade).
async fn set_mode(
    settings: &Settings,
    composition: &DriverComposition,
    cx: &ConnectionTo<Agent>,
    active: &ActiveSession<'static, Agent>,
    modes: Option<SessionModeState>,
) -> Result<(), String> {
    let key = lineage_core::permission::mode_key(composition.sandbox_mode, composition.delegated);
    let Some(wanted) = settings.modes.get(key) else {
        return Ok(());
    };
    let offered: Vec<String> = modes
        .as_ref()
        .map(|m| m.available_modes.iter().map(|m| m.id.to_string()).collect())
        .unwrap_or_default();
    if !offered.iter().any(|m| m == wanted) {
        return Err(format!(
            "its profile runs a {key} session in mode {wanted:?}, which the agent does not offer (it offers: {}); fix modes.{key} in the profile",
            match offered.is_empty() {
                true => "no modes".to_owned(),
                false => offered.join(", "),
            }
        ));
    }
    if modes
        .as_ref()
        .is_some_and(|m| m.current_mode_id.to_string() == *wanted)
    {
        return Ok(());
    }
    let request = SetSessionModeRequest::new(active.session_id().clone(), wanted.clone());
    match tokio::time::timeout(settings.init_timeout, cx.send_request(request).block_task()).await {
        Ok(Ok(_)) => {
            tracing::info!(acp_session = %active.session_id(), mode = %wanted, policy = key, "ACP session mode set");
            Ok(())
        }
        Ok(Err(e)) => Err(format!(
            "session/set_mode {wanted:?} failed: {}",
            one_line(&sdk_error(&e))
        )),
        Err(_) => Err(format!(
            "it did not answer session/set_mode within {} ms",
            settings.init_timeout.as_millis()
        )),
    }
}

/// The agent's process: in the warm sandbox made for it when there is one (V2), else started
/// here (in a sandbox of its own when the profile has one).
async fn spawn(
    settings: &Settings,
    cwd: &std::path::Path,
    session: &str,
) -> Result<Spawned, DriverError> {
    let warm = settings
        .warm
        .as_ref()
        .and_then(|w| w.lock().ok().and_then(|mut w| w.take()));
    if let Some(warm) = warm {
        match warm
            .launch(&settings.command, settings.env.as_ref(), cwd)
            .await
        {
            Ok(spawned) => return Ok(spawned),
            Err(why) => {
                tracing::info!(session = %session, why = %why, "the warm sandbox failed; making one");
            }
        }
    }
    Process::spawn(
        &settings.command,
        cwd,
        settings.env.as_ref(),
        settings.sandbox.as_ref(),
        session,
    )
    .await
}

/// lineage's tools as one MCP server entry: over HTTP to an agent that declared it (when the
/// node serves HTTP), else the stdio bridge every agent supports; none when the session's
/// profile has no tools.
/// The session's `mcpServers`: lineage's tools, then the editor's passed servers.
fn session_servers(
    settings: &Settings,
    transport: ToolsTransport,
    editor: &[McpServer],
) -> Vec<McpServer> {
    let mut servers = tools_servers(settings, transport);
    servers.extend(editor.iter().cloned());
    servers
}

/// A root's editor's servers, as the agent gets them: only when the profile passes them
/// (`pass_mcp_servers`) and the agent takes MCP over HTTP (`mcpCapabilities.http`); what is
/// left out is one log line (names only: the headers are the editor's credentials).
fn editor_servers(
    settings: &Settings,
    composition: &DriverComposition,
    agent_takes_http: bool,
    session: &str,
) -> Vec<McpServer> {
    let passed = &composition.mcp_servers;
    if passed.is_empty() {
        return Vec::new();
    }
    let names: Vec<&str> = passed.iter().map(|s| s.name.as_str()).collect();
    if !settings.pass_mcp_servers || !agent_takes_http {
        tracing::info!(
            session,
            servers = ?names,
            reason = match settings.pass_mcp_servers {
                false => "the profile does not pass an editor's servers (pass_mcp_servers = false)",
                true => "the agent does not take MCP over HTTP (no mcpCapabilities.http)",
            },
            "the editor's MCP servers are not given to the agent"
        );
        return Vec::new();
    }
    tracing::info!(session, servers = ?names, "the editor's MCP servers given to the agent");
    passed
        .iter()
        .map(|s| {
            let headers = s
                .headers
                .iter()
                .map(|h| HttpHeader::new(h.name.clone(), h.value.clone()))
                .collect();
            McpServer::Http(McpServerHttp::new(s.name.clone(), s.url.clone()).headers(headers))
        })
        .collect()
}

fn tools_servers(settings: &Settings, transport: ToolsTransport) -> Vec<McpServer> {
    let Some(tools) = &settings.tools else {
        return Vec::new();
    };
    if let (ToolsTransport::Http, Some(http)) = (transport, &tools.http) {
        let headers = http
            .headers
            .iter()
            .map(|(name, value)| HttpHeader::new(name.clone(), value.clone()))
            .collect();
        let server =
            McpServerHttp::new(super::TOOLS_SERVER_NAME, http.url.clone()).headers(headers);
        return vec![McpServer::Http(server)];
    }
    let Some((program, args)) = tools.bridge.split_first() else {
        return Vec::new();
    };
    let env = tools
        .env
        .iter()
        .map(|(name, value)| EnvVariable::new(name.clone(), value.clone()))
        .collect();
    let server = McpServerStdio::new(super::TOOLS_SERVER_NAME, program)
        .args(args.to_vec())
        .env(env);
    vec![McpServer::Stdio(server)]
}

/// The agent's working directory, absolute; a `BadRequest` when it is not a directory.
fn working_dir(
    settings: &Settings,
    error: &dyn Fn(&str) -> DriverError,
) -> Result<PathBuf, DriverError> {
    let cwd = if settings.cwd.is_absolute() {
        settings.cwd.clone()
    } else {
        std::env::current_dir()
            .map_err(|e| error(&format!("cannot resolve the working directory: {e}")))?
            .join(&settings.cwd)
    };
    if !cwd.is_dir() {
        return Err(DriverError::BadRequest(format!(
            "the ACP agent's working directory {} is not a directory; create it or pick another",
            cwd.display()
        )));
    }
    Ok(cwd)
}

/// Loads the agent's session `id` (`session/load`), discarding the history the agent replays
/// before it answers; `None` (logged) when the agent cannot, so a new session is opened.
#[allow(clippy::too_many_arguments)]
async fn load(
    settings: &Settings,
    transport: ToolsTransport,
    editor: &[McpServer],
    instructions: &Instructions,
    cx: &ConnectionTo<Agent>,
    cwd: &std::path::Path,
    session: &str,
    id: String,
) -> Option<(ActiveSession<'static, Agent>, Option<SessionModeState>)> {
    // The tools again: a resumed session has a new grant (and so a new secret); and the
    // instructions again, for an agent that takes them on a load.
    let request = LoadSessionRequest::new(id.clone(), cwd)
        .mcp_servers(session_servers(settings, transport, editor))
        .system_prompt(instructions.system_prompt());
    let load = cx.load_session_from(request).block_task().start_session();
    let (mut active, modes) = match tokio::time::timeout(settings.init_timeout, load).await {
        Ok(Ok(setup)) => (setup.session, setup.response.modes),
        Ok(Err(e)) => {
            tracing::warn!(
                session = %session,
                acp_session = %id,
                error = %one_line(&sdk_error(&e)),
                "ACP session/load failed; opening a new session and replaying the log"
            );
            return None;
        }
        Err(_) => {
            tracing::warn!(
                session = %session,
                acp_session = %id,
                "ACP session/load timed out; opening a new session and replaying the log"
            );
            return None;
        }
    };
    // The history the agent replayed before answering `session/load` is queued on the
    // session; it is not part of any reply.
    let mut replayed = 0usize;
    while let Some(Ok(message)) = active.read_update().now_or_never() {
        if let SessionMessage::Message(dispatch) = message {
            replayed += 1;
            drop(absorb(dispatch, &PermissionPolicy::Deny).await);
        }
    }
    tracing::info!(session = %session, replayed, "ACP session loaded");
    Some((active, modes))
}
