//! `lineage-acp-testagent`: a small, deterministic Agent Client Protocol agent over stdio, used
//! to test lineage's `acp` driver without a real model.
//!
//! Behaviour:
//! - `initialize` advertises `loadSession` (unless started with `--no-load`), and
//!   `mcpCapabilities.http` when started with `--mcp-http`.
//! - `session/new` creates a session; every session is remembered in `sessions.json` in the
//!   directory given by `--dir <path>`, else by `LINEAGE_ACP_TESTAGENT_DIR`, else a directory in
//!   the system temp dir, so a new process can `session/load` a session an older process
//!   created. `session/load` replays the history as `user_message_chunk` /
//!   `agent_message_chunk` updates.
//! - `session/prompt` answers `echo: <prompt text> [turn N]`, where N counts the prompts of the
//!   session including loaded history, streamed as three `agent_message_chunk` updates.
//!   A prompt containing `slow` waits up to 10 s unless `session/cancel` arrives, and then ends
//!   with stop reason `cancelled`; one containing `refuse` ends with stop reason `refusal`; one
//!   containing `ask` first asks the client's permission (options `allow` / `reject`; `ask
//!   tool:NAME` names the tool call `NAME`, kind `other`) and adds
//!   ` [permission: selected <option>|cancelled]` to the reply. Every answered prompt ends with a
//!   `usage_update`: 100 tokens in context and a cumulative cost of 0.0005 USD per turn.
//! - A prompt with `tool: NAME {json}` lines calls those tools, in order, on the stdio MCP
//!   server named `lineage` that its session was given ([`tools`]), and replies with one
//!   `tool NAME: <result>` line each (instead of the echo).
//! - The prompt `mcp-servers` replies with the MCP servers its session was given: `mcp servers:`
//!   then one line each, `NAME stdio|http URL-or-program [HEADER=<N chars>, ...]` (header values
//!   are never shown, only their lengths).
//! - A prompt with `sh: COMMAND` lines (and no `tool:` line) runs each with `/bin/sh -c` and
//!   replies with their exit codes and output ([`shell`]): a hosted agent's shell tool.

mod shell;
mod tools;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, Cost, Implementation,
    InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    McpCapabilities, NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind,
    PromptRequest, PromptResponse, RequestPermissionOutcome, RequestPermissionRequest,
    SessionNotification, SessionUpdate, StopReason, ToolCallUpdate, ToolCallUpdateFields,
    UsageUpdate,
};
use agent_client_protocol::{Agent, ByteStreams, Error};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// Environment variable naming the directory that holds `sessions.json`.
const DIR_ENV: &str = "LINEAGE_ACP_TESTAGENT_DIR";
/// How long a `slow` prompt waits for `session/cancel`.
const SLOW_WAIT: Duration = Duration::from_secs(10);

/// One remembered message of a session.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// `user` or `agent`.
    role: String,
    /// The text.
    text: String,
}

/// The agent's state, shared by its handlers.
#[derive(Debug, Default)]
struct State {
    /// Every session this agent knows, by id.
    sessions: HashMap<String, Vec<Entry>>,
    /// The cancel signal of each session's running prompt.
    cancels: HashMap<String, Arc<CancelSignal>>,
    /// The stdio MCP servers each session was given.
    servers: HashMap<String, Vec<tools::ToolServer>>,
    /// The last child each session's `spawn_subagent` returned (`$child`).
    last_child: HashMap<String, String>,
}

/// A per-session cancel flag with a wake-up.
#[derive(Debug, Default)]
struct CancelSignal {
    requested: AtomicBool,
    notify: Notify,
}

/// Where sessions are stored: `--dir <path>`, else `$LINEAGE_ACP_TESTAGENT_DIR`, else a
/// directory in the system temp dir.
fn store_path() -> PathBuf {
    let mut args = std::env::args().skip_while(|arg| arg != "--dir").skip(1);
    let dir = args
        .next()
        .map(PathBuf::from)
        .or_else(|| std::env::var_os(DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| std::env::temp_dir().join("lineage-acp-testagent"));
    dir.join("sessions.json")
}

/// Reads the stored sessions; a missing or unreadable file is an empty store.
fn read_store() -> HashMap<String, Vec<Entry>> {
    std::fs::read(store_path())
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Merges `id`'s history into the stored sessions (write to a temp file, then rename).
fn save_session(id: &str, history: &[Entry]) -> std::io::Result<()> {
    let path = store_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut all = read_store();
    all.insert(id.to_string(), history.to_vec());
    let bytes = serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?;
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, &path)
}

/// Appends one prompt and its reply to `id`'s history and stores it.
fn remember(state: &Mutex<State>, id: &str, text: String, reply: String) -> std::io::Result<()> {
    let history = {
        let mut guard = lock(state);
        let history = guard.sessions.entry(id.to_string()).or_default();
        history.push(Entry {
            role: "user".into(),
            text,
        });
        history.push(Entry {
            role: "agent".into(),
            text: reply,
        });
        history.clone()
    };
    save_session(id, &history)
}

/// The text of a prompt: its text blocks joined by newlines, without the block of instructions
/// lineage opens a delegated child's first prompt with (the test agent takes no system prompt):
/// its words ("refused", ...) are not the test's keywords.
fn prompt_text(prompt: &[ContentBlock]) -> String {
    prompt
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) if !text.text.starts_with(INSTRUCTIONS_HEADING) => {
                Some(text.text.as_str())
            }
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// How lineage's instructions block begins (`lineage_drivers::acp::INSTRUCTIONS_HEADING`).
const INSTRUCTIONS_HEADING: &str = "[The instructions you run under, from lineage";

/// A `session/update` notification carrying one chunk of text.
fn chunk(session: &str, agent: bool, text: String) -> SessionNotification {
    let content = ContentChunk::new(ContentBlock::from(text));
    let update = if agent {
        SessionUpdate::AgentMessageChunk(content)
    } else {
        SessionUpdate::UserMessageChunk(content)
    };
    SessionNotification::new(session.to_string(), update)
}

/// A `usage_update` after turn `turn` (deterministic: 100 tokens and 0.0005 USD per turn).
fn usage(session: &str, turn: usize) -> SessionNotification {
    let turn = turn as u64;
    SessionNotification::new(
        session.to_string(),
        SessionUpdate::UsageUpdate(
            UsageUpdate::new(100 * turn, 200_000).cost(Cost::new(0.0005 * turn as f64, "USD")),
        ),
    )
}

/// A request error carrying a one-line reason.
fn invalid(reason: String) -> Error {
    Error::invalid_params().data(reason)
}

/// Locks the state, recovering from a poisoned lock (the state stays usable).
fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let advertise_load = !std::env::args().any(|arg| arg == "--no-load");
    // `--mcp-http`: declare `mcpCapabilities.http` (the node then gives the tools' HTTP URL).
    let mcp_http = std::env::args().any(|arg| arg == "--mcp-http");
    let state = Arc::new(Mutex::new(State::default()));
    let counter = Arc::new(AtomicU64::new(0));

    let transport = ByteStreams::new(
        tokio::io::stdout().compat_write(),
        tokio::io::stdin().compat(),
    );

    let result = Agent
        .v1()
        .name("lineage-acp-testagent")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                responder.respond(
                    InitializeResponse::new(request.protocol_version)
                        .agent_capabilities(
                            AgentCapabilities::new()
                                .load_session(advertise_load)
                                .mcp_capabilities(McpCapabilities::new().http(mcp_http)),
                        )
                        .agent_info(Implementation::new(
                            "lineage-acp-testagent",
                            env!("CARGO_PKG_VERSION"),
                        )),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: NewSessionRequest, responder, _cx| {
                    let id = format!(
                        "testagent-{}-{}-{}",
                        std::process::id(),
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map(|d| d.as_millis())
                            .unwrap_or_default(),
                        counter.fetch_add(1, Ordering::Relaxed)
                    );
                    lock(&state).sessions.insert(id.clone(), Vec::new());
                    lock(&state)
                        .servers
                        .insert(id.clone(), tools::servers(&request.mcp_servers, mcp_http));
                    if let Err(e) = save_session(&id, &[]) {
                        return responder
                            .respond_with_error(invalid(format!("cannot store session: {e}")));
                    }
                    responder.respond(NewSessionResponse::new(id))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: LoadSessionRequest, responder, cx| {
                    let id = request.session_id.to_string();
                    let Some(history) = read_store().remove(&id) else {
                        return responder
                            .respond_with_error(invalid(format!("unknown session {id}")));
                    };
                    for entry in &history {
                        cx.send_notification(chunk(
                            &id,
                            entry.role == "agent",
                            entry.text.clone(),
                        ))?;
                    }
                    lock(&state)
                        .servers
                        .insert(id.clone(), tools::servers(&request.mcp_servers, mcp_http));
                    lock(&state).sessions.insert(id, history);
                    responder.respond(LoadSessionResponse::new())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: PromptRequest, responder, cx| {
                    let id = request.session_id.to_string();
                    let text = prompt_text(&request.prompt);
                    let signal = Arc::new(CancelSignal::default());
                    let turn = {
                        let mut guard = lock(&state);
                        let Some(history) = guard.sessions.get(&id) else {
                            return responder
                                .respond_with_error(invalid(format!("unknown session {id}")));
                        };
                        let turn = history.iter().filter(|e| e.role == "user").count() + 1;
                        guard.cancels.insert(id.clone(), signal.clone());
                        turn
                    };
                    let state = state.clone();
                    // Run the turn off the dispatch loop, so `session/cancel` can arrive meanwhile.
                    cx.clone().spawn(async move {
                        // Tool directives run first, then a `slow` wait, then the reply.
                        let directives = tools::directives(&text);
                        // The keywords below are read outside the directive lines.
                        let plain: String = text
                            .lines()
                            .filter(|l| {
                                let l = l.trim_start();
                                !l.starts_with("tool:")
                                    && !l.starts_with("tool-bench:")
                                    && !l.starts_with("sh:")
                            })
                            .collect::<Vec<_>>()
                            .join("\n");
                        let bench = tools::bench_directive(&text);
                        let tool_reply = if plain.trim() == "mcp-servers" {
                            let servers =
                                lock(&state).servers.get(&id).cloned().unwrap_or_default();
                            Some(tools::describe(&servers))
                        } else if let Some((n, directive)) = bench {
                            let servers =
                                lock(&state).servers.get(&id).cloned().unwrap_or_default();
                            Some(match tools::parse(&directive, None) {
                                Ok((name, args)) => tools::bench(&servers, n, &name, args).await,
                                Err(line) => line,
                            })
                        } else if directives.is_empty() {
                            let commands = shell::directives(&text);
                            let servers =
                                lock(&state).servers.get(&id).cloned().unwrap_or_default();
                            let mut lines = Vec::new();
                            for command in &commands {
                                lines.push(shell::run(command, &servers).await);
                            }
                            (!lines.is_empty()).then(|| lines.join("\n"))
                        } else {
                            let servers =
                                lock(&state).servers.get(&id).cloned().unwrap_or_default();
                            let mut lines = Vec::new();
                            let mut last_child = lock(&state).last_child.get(&id).cloned();
                            for directive in directives {
                                let line = match tools::parse(&directive, last_child.as_deref()) {
                                    Ok((name, args)) => tools::call(&servers, &name, args).await,
                                    Err(line) => line,
                                };
                                if let Some(child) = tools::child_of(&line) {
                                    last_child = Some(child.clone());
                                    lock(&state).last_child.insert(id.clone(), child);
                                }
                                lines.push(line);
                            }
                            Some(lines.join("\n"))
                        };
                        if plain.contains("slow") {
                            let deadline = tokio::time::Instant::now() + SLOW_WAIT;
                            loop {
                                let notified = signal.notify.notified();
                                if signal.requested.load(Ordering::SeqCst) {
                                    cx.send_notification(chunk(&id, true, "stopping".into()))?;
                                    return responder
                                        .respond(PromptResponse::new(StopReason::Cancelled));
                                }
                                tokio::select! {
                                    () = notified => {}
                                    () = tokio::time::sleep_until(deadline) => break,
                                }
                            }
                        }
                        if plain.contains("refuse") {
                            return responder.respond(PromptResponse::new(StopReason::Refusal));
                        }
                        if let Some(reply) = tool_reply {
                            cx.send_notification(chunk(&id, true, reply.clone()))?;
                            cx.send_notification(usage(&id, turn))?;
                            if let Err(e) = remember(&state, &id, text, reply) {
                                return responder.respond_with_error(invalid(format!(
                                    "cannot store session: {e}"
                                )));
                            }
                            return responder.respond(PromptResponse::new(StopReason::EndTurn));
                        }
                        let mut suffix = String::new();
                        if plain.contains("ask") {
                            let request = RequestPermissionRequest::new(
                                id.clone(),
                                ToolCallUpdate::new("tool-1", permission_fields(&plain)),
                                vec![
                                    PermissionOption::new(
                                        "allow",
                                        "Allow",
                                        PermissionOptionKind::AllowOnce,
                                    ),
                                    PermissionOption::new(
                                        "reject",
                                        "Reject",
                                        PermissionOptionKind::RejectOnce,
                                    ),
                                ],
                            );
                            let answer = match cx.send_request(request).block_task().await {
                                Ok(response) => match response.outcome {
                                    RequestPermissionOutcome::Selected(selected) => {
                                        format!("selected {}", selected.option_id)
                                    }
                                    RequestPermissionOutcome::Cancelled => "cancelled".into(),
                                    _ => "unknown".into(),
                                },
                                Err(e) => format!("error {}", e.code),
                            };
                            suffix = format!(" [permission: {answer}]");
                        }
                        let reply = format!("echo: {text} [turn {turn}]{suffix}");
                        cx.send_notification(chunk(&id, true, "echo: ".into()))?;
                        cx.send_notification(chunk(&id, true, text.clone()))?;
                        cx.send_notification(chunk(&id, true, format!(" [turn {turn}]")))?;
                        if !suffix.is_empty() {
                            cx.send_notification(chunk(&id, true, suffix))?;
                        }
                        cx.send_notification(usage(&id, turn))?;
                        if let Err(e) = remember(&state, &id, text, reply) {
                            return responder
                                .respond_with_error(invalid(format!("cannot store session: {e}")));
                        }
                        responder.respond(PromptResponse::new(StopReason::EndTurn))
                    })
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            {
                let state = state.clone();
                async move |cancel: CancelNotification, _cx| {
                    let id = cancel.session_id.to_string();
                    if let Some(signal) = lock(&state).cancels.get(&id) {
                        signal.requested.store(true, Ordering::SeqCst);
                        signal.notify.notify_waiters();
                    }
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await;

    if let Err(e) = result {
        eprintln!("lineage-acp-testagent: connection failed: {e}");
        std::process::exit(1);
    }
}

/// The tool call a permission request names: `ask tool:NAME` in the prompt asks for a tool of
/// kind `other` titled `NAME` (how Gemini CLI asks for an MCP tool), a bare `ask` for nothing
/// named.
fn permission_fields(prompt: &str) -> ToolCallUpdateFields {
    match prompt.split_once("ask tool:") {
        Some((_, rest)) => {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            ToolCallUpdateFields::new()
                .title(name)
                .kind(agent_client_protocol::v1::schema::ToolKind::Other)
        }
        None => ToolCallUpdateFields::new(),
    }
}
