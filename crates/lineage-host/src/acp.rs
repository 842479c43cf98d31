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
//! one-line [`HostError::Driver`]; nothing the agent sends can make the driver panic.
//!
//! The SDK's connection futures are `Send`, so the connection runs as an ordinary tokio task and
//! [`AcpDriver`] is `Send`.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::util::MatchDispatch;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, ContentChunk, Implementation, InitializeRequest,
    PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionId as AcpSessionId,
    SessionNotification, SessionUpdate, StopReason,
};
use agent_client_protocol::v1::{ActiveSession, ConnectionTo, SessionMessage};
use agent_client_protocol::{Agent, ByteStreams, Client};
use futures::FutureExt;
use lineage_core::log::SessionEvent;
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::driver::{AgentDriver, BoxFuture, DriverAction, DriverStart, TurnInput, TurnMessage};
use crate::error::HostError;

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

/// Lines of the agent's stderr kept for error messages.
const STDERR_TAIL: usize = 20;
/// Longest piece of agent-provided text put into an error message.
const MAX_DETAIL: usize = 300;

/// How the driver answers an agent's `session/request_permission` requests (it has no user).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PermissionPolicy {
    /// Answer `cancelled`: the agent may not run tools that need permission.
    #[default]
    Deny,
    /// Pick the agent's `allow_once` option (else `allow_always`); `cancelled` when it offers
    /// neither.
    AllowOnce,
}

/// The `acp` driver: hosts one ACP agent subprocess and one ACP session in it.
#[derive(Debug)]
pub struct AcpDriver {
    command: Vec<String>,
    cwd: PathBuf,
    /// When set, the agent's whole environment (nothing else from the node leaks, T4).
    env: Option<std::collections::BTreeMap<String, String>>,
    init_timeout: Duration,
    prompt_timeout: Duration,
    cancel_grace: Duration,
    permissions: PermissionPolicy,
    /// The hosted lineage session, for error messages ("-" before start).
    label: String,
    live: Option<Live>,
}

/// A running agent: its process, connection and session.
#[derive(Debug)]
struct Live {
    child: Child,
    connection: ConnectionTo<Agent>,
    session: ActiveSession<'static, Agent>,
    /// Ends the connection's foreground (and so the connection) when sent or dropped.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<()>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Prompts sent whose `session/prompt` response has not been read yet.
    unanswered: usize,
    /// Earlier conversation to prepend to the next prompt (cold resume without `session/load`).
    replay: Option<String>,
    /// True when the session was restored with `session/load`.
    loaded: bool,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.task.abort();
    }
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
    pub fn cancel(&self) -> Result<(), HostError> {
        self.connection
            .send_notification(CancelNotification::new(self.session_id.clone()))
            .map_err(|e| HostError::Driver {
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
            command,
            cwd,
            env: None,
            init_timeout: DEFAULT_INIT_TIMEOUT,
            prompt_timeout: DEFAULT_PROMPT_TIMEOUT,
            cancel_grace: DEFAULT_CANCEL_GRACE,
            permissions: PermissionPolicy::default(),
            label: "-".into(),
            live: None,
        }
    }

    /// Runs the agent with exactly this environment (a profile's), not the node's.
    pub fn with_env(mut self, env: std::collections::BTreeMap<String, String>) -> Self {
        self.env = Some(env);
        self
    }

    /// Sets the deadline for `initialize` and for opening or loading the session.
    pub fn with_init_timeout(mut self, timeout: Duration) -> Self {
        self.init_timeout = timeout;
        self
    }

    /// Sets the deadline for one prompt turn.
    pub fn with_prompt_timeout(mut self, timeout: Duration) -> Self {
        self.prompt_timeout = timeout;
        self
    }

    /// Sets how long [`AgentDriver::cancel`] waits for the agent to end a cancelled prompt.
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Sets how permission requests are answered.
    pub fn with_permission_policy(mut self, policy: PermissionPolicy) -> Self {
        self.permissions = policy;
        self
    }

    /// The agent's own session id, once started.
    pub fn acp_session_id(&self) -> Option<String> {
        self.live
            .as_ref()
            .map(|live| live.session.session_id().to_string())
    }

    /// True when the running session was restored with `session/load`.
    pub fn session_loaded(&self) -> bool {
        self.live.as_ref().is_some_and(|live| live.loaded)
    }

    /// A handle that cancels the current turn from another task; `None` before start.
    pub fn canceller(&self) -> Option<AcpCanceller> {
        self.live.as_ref().map(|live| AcpCanceller {
            connection: live.connection.clone(),
            session_id: live.session.session_id().clone(),
            label: self.label.clone(),
        })
    }

    /// A one-line driver error.
    fn error(&self, what: impl AsRef<str>) -> HostError {
        HostError::Driver {
            session: self.label.clone(),
            reason: format!(
                "ACP agent `{}`: {}; check the agent command",
                self.program(),
                one_line(what.as_ref())
            ),
        }
    }

    /// A one-line driver error for a connection that broke, with the process's exit status and
    /// last stderr line when known.
    async fn broken(&mut self, what: impl AsRef<str>) -> HostError {
        let mut detail = one_line(what.as_ref());
        if let Some(live) = self.live.as_mut() {
            detail.push_str(&exit_detail(&mut live.child, &live.stderr).await);
        }
        self.error(detail)
    }

    fn program(&self) -> &str {
        self.command.first().map(String::as_str).unwrap_or("")
    }

    async fn start_inner(&mut self, start: DriverStart) -> Result<(), HostError> {
        self.label = start.session.as_str().to_string();
        if self.live.is_some() {
            return Err(self.error("the agent is already started"));
        }
        let Some(program) = self.command.first().cloned() else {
            return Err(HostError::BadRequest(
                "the ACP agent command is empty; give a program and its arguments".into(),
            ));
        };
        let cwd = if self.cwd.is_absolute() {
            self.cwd.clone()
        } else {
            std::env::current_dir()
                .map_err(|e| self.error(format!("cannot resolve the working directory: {e}")))?
                .join(&self.cwd)
        };
        if !cwd.is_dir() {
            return Err(HostError::BadRequest(format!(
                "the ACP agent's working directory {} is not a directory; create it or pick another",
                cwd.display()
            )));
        }

        let mut command = Command::new(&program);
        if let Some(env) = &self.env {
            command.env_clear().envs(env);
        }
        let mut child = command
            .args(&self.command[1..])
            .current_dir(&cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| self.error(format!("cannot start it: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(HostError::Internal(
                "an ACP agent was spawned without piped stdio".into(),
            ));
        };

        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        tokio::spawn(collect_stderr(stderr, tail.clone(), self.label.clone()));

        let (cx_tx, cx_rx) = tokio::sync::oneshot::channel::<ConnectionTo<Agent>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let transport = ByteStreams::new(stdin.compat_write(), stdout.compat());
        let connection = Client.v1().name("lineage-host").connect_with(
            transport,
            async move |cx: ConnectionTo<Agent>| {
                drop(cx_tx.send(cx));
                drop(stop_rx.await);
                Ok(())
            },
        );
        let label = self.label.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(session = %label, error = %sdk_error(&e), "ACP connection ended");
            }
        });
        let Ok(cx) = cx_rx.await else {
            let detail = exit_detail(&mut child, &tail).await;
            return Err(self.error(format!("the connection ended before it started{detail}")));
        };

        // Initialize, with a deadline.
        let request = InitializeRequest::new(ProtocolVersion::V1).client_info(Implementation::new(
            "lineage-host",
            env!("CARGO_PKG_VERSION"),
        ));
        let init = tokio::time::timeout(self.init_timeout, cx.send_request(request).block_task());
        let response = match init.await {
            Err(_) => {
                return Err(self.error(format!(
                    "it did not answer initialize within {} ms",
                    self.init_timeout.as_millis()
                )))
            }
            Ok(Err(e)) => {
                let detail = exit_detail(&mut child, &tail).await;
                return Err(self.error(format!("initialize failed: {}{detail}", sdk_error(&e))));
            }
            Ok(Ok(response)) => response,
        };
        if response.protocol_version != ProtocolVersion::V1 {
            return Err(self.error(format!(
                "it speaks ACP protocol version {}, lineage speaks version 1",
                response.protocol_version
            )));
        }
        let can_load = response.agent_capabilities.load_session;

        // Open the session: load it on a cold resume when possible, else a new one.
        let recorded = if start.resumed {
            recorded_session(&start.log)
        } else {
            None
        };
        let mut loaded = None;
        if let (true, Some(id)) = (can_load, recorded.as_ref()) {
            let load = cx
                .load_session(id.clone(), &cwd)
                .block_task()
                .start_session();
            match tokio::time::timeout(self.init_timeout, load).await {
                Ok(Ok(setup)) => loaded = Some(setup.session),
                Ok(Err(e)) => tracing::warn!(
                    session = %self.label,
                    acp_session = %id,
                    error = %one_line(&sdk_error(&e)),
                    "ACP session/load failed; opening a new session and replaying the log"
                ),
                Err(_) => tracing::warn!(
                    session = %self.label,
                    acp_session = %id,
                    "ACP session/load timed out; opening a new session and replaying the log"
                ),
            }
        }
        let was_loaded = loaded.is_some();
        let mut session = match loaded {
            Some(session) => session,
            None => {
                let open = cx.build_session(&cwd).block_task().start_session();
                match tokio::time::timeout(self.init_timeout, open).await {
                    Ok(Ok(setup)) => setup.session,
                    Ok(Err(e)) => {
                        let detail = exit_detail(&mut child, &tail).await;
                        return Err(
                            self.error(format!("session/new failed: {}{detail}", sdk_error(&e)))
                        );
                    }
                    Err(_) => {
                        return Err(self.error(format!(
                            "it did not answer session/new within {} ms",
                            self.init_timeout.as_millis()
                        )))
                    }
                }
            }
        };
        if was_loaded {
            // The history the agent replayed before answering `session/load` is queued on the
            // session; it is not part of any reply.
            let mut replayed = 0usize;
            while let Some(Ok(message)) = session.read_update().now_or_never() {
                if let SessionMessage::Message(dispatch) = message {
                    replayed += 1;
                    drop(absorb(dispatch, PermissionPolicy::Deny).await);
                }
            }
            tracing::info!(session = %self.label, replayed, "ACP session loaded");
        }
        let replay = if start.resumed && !was_loaded {
            render_history(&start.log)
        } else {
            None
        };
        tracing::info!(
            session = %self.label,
            acp_session = %session.session_id(),
            resumed = start.resumed,
            loaded = was_loaded,
            "ACP agent started"
        );
        self.live = Some(Live {
            child,
            connection: cx,
            session,
            stop: Some(stop_tx),
            task,
            stderr: tail,
            unanswered: 0,
            replay,
            loaded: was_loaded,
        });
        Ok(())
    }

    async fn turn_inner(&mut self, input: TurnInput) -> Result<Vec<DriverAction>, HostError> {
        if self.live.is_none() {
            return Err(self.error("the agent is not started; start the driver first"));
        }
        // Cancel and wind down prompts left over from an abandoned turn.
        self.cancel_inner().await;

        let permissions = self.permissions;
        let prompt_timeout = self.prompt_timeout;
        let Some(live) = self.live.as_mut() else {
            return Err(HostError::Internal("the ACP agent vanished".into()));
        };
        let mut blocks: Vec<ContentBlock> = Vec::new();
        if let Some(replay) = live.replay.take() {
            blocks.push(ContentBlock::from(replay));
        }
        blocks.extend(
            input
                .messages
                .iter()
                .map(|m| ContentBlock::from(render_message(m))),
        );
        if blocks.is_empty() {
            blocks.push(ContentBlock::from("(no new messages)".to_string()));
        }
        let mut stale = live.unanswered;
        if let Err(e) = live.session.send_prompt_blocks(blocks) {
            let what = format!("cannot send session/prompt: {}", sdk_error(&e));
            return Err(self.broken(what).await);
        }
        live.unanswered += 1;

        let deadline = tokio::time::Instant::now() + prompt_timeout;
        let mut reply = String::new();
        let outcome = loop {
            let message = match tokio::time::timeout_at(deadline, live.session.read_update()).await
            {
                Err(_) => break Err(None),
                Ok(Err(e)) => {
                    break Err(Some(format!("the session stream broke: {}", sdk_error(&e))))
                }
                Ok(Ok(message)) => message,
            };
            match message {
                SessionMessage::Message(dispatch) => {
                    if let Some(text) = absorb(dispatch, permissions).await {
                        if stale == 0 {
                            reply.push_str(&text);
                        }
                    }
                }
                SessionMessage::PromptResponse(result) => {
                    live.unanswered = live.unanswered.saturating_sub(1);
                    if stale > 0 {
                        stale -= 1;
                        continue;
                    }
                    break Ok(result);
                }
                _ => {}
            }
        };
        match outcome {
            Err(None) => {
                let cancel = live
                    .connection
                    .send_notification(CancelNotification::new(live.session.session_id().clone()));
                drop(cancel);
                Err(self.error(format!(
                    "it did not finish the turn within {} ms; the turn was cancelled",
                    prompt_timeout.as_millis()
                )))
            }
            Err(Some(what)) => Err(self.broken(what).await),
            Ok(Err(e)) => {
                if agent_client_protocol::is_incoming_transport_closed(&e)
                    || agent_client_protocol::is_connection_terminated(&e)
                {
                    Err(self.broken("the connection closed during the turn").await)
                } else {
                    Ok(vec![DriverAction::Fail(format!(
                        "ACP agent answered the prompt with an error: {}",
                        one_line(&sdk_error(&e))
                    ))])
                }
            }
            Ok(Ok(response)) => Ok(match response.stop_reason {
                StopReason::Cancelled => vec![DriverAction::Fail(
                    "ACP agent turn was cancelled (interrupted)".into(),
                )],
                StopReason::Refusal => vec![DriverAction::Fail(
                    "ACP agent refused to answer the prompt".into(),
                )],
                StopReason::MaxTokens | StopReason::MaxTurnRequests => {
                    tracing::warn!(
                        session = %self.label,
                        stop_reason = ?response.stop_reason,
                        "ACP agent stopped early; its reply may be truncated"
                    );
                    vec![DriverAction::Reply(reply)]
                }
                _ => vec![DriverAction::Reply(reply)],
            }),
        }
    }

    /// Reads and discards the session's updates until every sent prompt was answered, or
    /// `grace` passed. Permission requests met meanwhile are answered `cancelled`.
    async fn drain(&mut self, grace: Duration) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        let deadline = tokio::time::Instant::now() + grace;
        while live.unanswered > 0 {
            match tokio::time::timeout_at(deadline, live.session.read_update()).await {
                Ok(Ok(SessionMessage::PromptResponse(_))) => live.unanswered -= 1,
                Ok(Ok(SessionMessage::Message(dispatch))) => {
                    drop(absorb(dispatch, PermissionPolicy::Deny).await);
                }
                Ok(Ok(_)) => {}
                Ok(Err(_)) | Err(_) => {
                    tracing::debug!(
                        session = %self.label,
                        unanswered = live.unanswered,
                        "ACP agent did not answer cancelled prompts in time"
                    );
                    return;
                }
            }
        }
    }

    async fn cancel_inner(&mut self) {
        let Some(live) = self.live.as_ref() else {
            return;
        };
        if live.unanswered == 0 {
            return;
        }
        let sent = live
            .connection
            .send_notification(CancelNotification::new(live.session.session_id().clone()));
        if let Err(e) = sent {
            tracing::debug!(session = %self.label, error = %one_line(&sdk_error(&e)), "cannot send session/cancel");
            return;
        }
        self.drain(self.cancel_grace).await;
    }

    async fn shutdown_inner(&mut self) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        if let Some(stop) = live.stop.take() {
            let _ = stop.send(());
        }
        if let Err(e) = live.child.start_kill() {
            tracing::debug!(session = %self.label, error = %e, "ACP agent already exited");
        }
        drop(tokio::time::timeout(Duration::from_secs(5), live.child.wait()).await);
        tracing::info!(session = %self.label, "ACP agent stopped");
    }
}

/// "; the agent exited (status); its last stderr line: ..." as far as known.
async fn exit_detail(child: &mut Child, stderr: &Mutex<VecDeque<String>>) -> String {
    let mut detail = String::new();
    if let Ok(Ok(status)) = tokio::time::timeout(Duration::from_millis(300), child.wait()).await {
        detail.push_str(&format!("; the agent exited ({status})"));
        // Give the stderr reader a moment to catch the agent's last words.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last = stderr.lock().ok().and_then(|tail| tail.back().cloned());
    if let Some(line) = last {
        detail.push_str(&format!("; its last stderr line: {}", one_line(&line)));
    }
    detail
}

impl AgentDriver for AcpDriver {
    fn start<'a>(&'a mut self, start: DriverStart) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(self.start_inner(start))
    }

    fn turn<'a>(
        &'a mut self,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<Vec<DriverAction>, HostError>> {
        Box::pin(self.turn_inner(input))
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

/// Handles one message the agent sent for the session: returns the text of an
/// `agent_message_chunk`, answers a permission request per `policy`, ignores the rest. Malformed
/// messages are logged and ignored.
async fn absorb(
    dispatch: agent_client_protocol::v1::Dispatch,
    policy: PermissionPolicy,
) -> Option<String> {
    let mut text = None;
    let matched = MatchDispatch::new(dispatch.into_raw())
        .if_notification(async |notification: SessionNotification| {
            if let SessionUpdate::AgentMessageChunk(ContentChunk {
                content: ContentBlock::Text(chunk),
                ..
            }) = notification.update
            {
                text = Some(chunk.text);
            }
            Ok(())
        })
        .await
        .if_request(async |request: RequestPermissionRequest, responder| {
            responder.respond(RequestPermissionResponse::new(permission_outcome(
                &request, policy,
            )))
        })
        .await
        .otherwise_ignore();
    if let Err(e) = matched {
        tracing::debug!(error = %one_line(&sdk_error(&e)), "ignored a malformed ACP session message");
    }
    text
}

/// The answer to a permission request under `policy`.
fn permission_outcome(
    request: &RequestPermissionRequest,
    policy: PermissionPolicy,
) -> RequestPermissionOutcome {
    if policy == PermissionPolicy::Deny {
        return RequestPermissionOutcome::Cancelled;
    }
    [
        PermissionOptionKind::AllowOnce,
        PermissionOptionKind::AllowAlways,
    ]
    .iter()
    .find_map(|kind| {
        request
            .options
            .iter()
            .find(|option| option.kind == *kind)
            .map(|option| option.option_id.clone())
    })
    .map_or(RequestPermissionOutcome::Cancelled, |id| {
        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id))
    })
}

/// Reads the agent's stderr line by line, keeping the last lines for error messages.
async fn collect_stderr(
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
    label: String,
) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(session = %label, line = %line, "ACP agent stderr");
        if line.trim().is_empty() {
            continue;
        }
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
}

/// The agent's session id recorded in the log (the last [`ACP_SESSION_EVENT`]).
fn recorded_session(log: &[SessionEvent]) -> Option<String> {
    log.iter()
        .rev()
        .filter(|event| event.kind == ACP_SESSION_EVENT)
        .find_map(|event| match &event.data {
            Value::String(id) => Some(id.clone()),
            Value::Object(map) => map
                .get("acp_session_id")
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        })
        .filter(|id| !id.is_empty())
}

/// The log's user and assistant turns as context for a fresh agent session; `None` when there
/// are none.
fn render_history(log: &[SessionEvent]) -> Option<String> {
    let turns: Vec<String> = log
        .iter()
        .filter_map(|event| {
            let who = match event.kind.as_str() {
                "turn/user" => "User",
                "turn/assistant" => "Assistant",
                _ => return None,
            };
            Some(format!("{who}: {}", event_text(&event.data)))
        })
        .collect();
    if turns.is_empty() {
        return None;
    }
    Some(format!(
        "[lineage] This conversation is resumed on a fresh agent session. The earlier turns \
         follow for context.\n{}\n[lineage] End of the earlier turns; the new message follows.",
        turns.join("\n")
    ))
}

/// The text of a turn event's data: `text`, `content` or `messages`, else the JSON itself.
fn event_text(data: &Value) -> String {
    match data {
        Value::String(text) => text.clone(),
        Value::Object(map) => {
            for key in ["text", "content", "reply"] {
                if let Some(text) = map.get(key).and_then(Value::as_str) {
                    return text.to_string();
                }
            }
            if let Some(messages) = map.get("messages").and_then(Value::as_array) {
                return messages
                    .iter()
                    .map(event_text)
                    .collect::<Vec<_>>()
                    .join("\n");
            }
            if let Some(summary) = map.get("summary").and_then(Value::as_str) {
                return summary.to_string();
            }
            data.to_string()
        }
        other => other.to_string(),
    }
}

/// A turn message as prompt text.
fn render_message(message: &TurnMessage) -> String {
    match message {
        TurnMessage::User { content } => content.clone(),
        TurnMessage::SubagentReport {
            sender_session_id,
            content,
        } => format!(
            "[report from subagent {}]\n{content}",
            sender_session_id.as_str()
        ),
        TurnMessage::SubagentSettled {
            sender_session_id,
            summary,
        } => format!(
            "[subagent {} settled] {summary}",
            sender_session_id.as_str()
        ),
    }
}

/// An SDK error on one line: its message and compact data.
fn sdk_error(e: &agent_client_protocol::Error) -> String {
    if agent_client_protocol::is_incoming_transport_closed(e) {
        return "the agent closed its output".into();
    }
    if agent_client_protocol::is_connection_terminated(e) {
        return "the connection to the agent ended".into();
    }
    match &e.data {
        None => e.message.clone(),
        Some(Value::String(data)) => format!("{}: {data}", e.message),
        Some(data) => format!("{}: {data}", e.message),
    }
}

/// `text` on one line: control characters become spaces, runs of spaces collapse, and the
/// result is cut at [`MAX_DETAIL`] characters.
fn one_line(text: &str) -> String {
    let flat = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>();
    let mut out = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.chars().count() > MAX_DETAIL {
        out = out.chars().take(MAX_DETAIL).collect::<String>() + "…";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, kind: &str, data: Value) -> SessionEvent {
        SessionEvent {
            seq,
            kind: kind.into(),
            data,
            at_ms: seq,
        }
    }

    #[test]
    fn history_renders_user_and_assistant_turns_only() {
        let log = vec![
            event(1, "subagent/descriptor", json!({})),
            event(2, "turn/user", json!({"text": "hi"})),
            event(3, "turn/assistant", json!({"text": "hello"})),
        ];
        let text = render_history(&log).unwrap();
        assert!(text.contains("User: hi\nAssistant: hello"), "{text}");
        assert_eq!(render_history(&log[..1]), None);
    }

    #[test]
    fn recorded_session_takes_the_last_record() {
        let log = vec![
            event(1, ACP_SESSION_EVENT, json!({"acp_session_id": "a"})),
            event(2, ACP_SESSION_EVENT, json!({"acp_session_id": "b"})),
            event(3, ACP_SESSION_EVENT, json!(42)),
        ];
        assert_eq!(recorded_session(&log).as_deref(), Some("b"));
        assert_eq!(recorded_session(&[]), None);
    }

    #[test]
    fn one_line_flattens_and_truncates() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        assert_eq!(one_line(&"x".repeat(1000)).chars().count(), MAX_DETAIL + 1);
    }
}
