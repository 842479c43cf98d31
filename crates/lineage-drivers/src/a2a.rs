//! The A2A driver (issue 38, A2): a session whose agent is a remote A2A agent, reached with
//! the protocol's official Rust client (`a2a-client-lf`, JSON-RPC). The remote agent is a
//! child like any other: depth, fan-out, deadlines, budgets and drain apply to its session.
//!
//! - **Which agent:** the profile's `url` (the operator's, never a request's) and, when the
//!   remote wants one, the bearer token in the node's environment variable `bearer_env`.
//! - **Start:** reads the agent's card (`<url>/.well-known/agent-card.json`) and takes its
//!   JSON-RPC interface; picks up the remote task from the last `driver/state` in the log.
//! - **A turn** is one `SendMessage`: the turn's messages as one text part, its `messageId`
//!   `<session>-turn-<index>` (a server that keeps message ids recognises a retried turn), the
//!   remote task's id once there is one, so the remote agent sees one conversation. The reply
//!   is the task's status message, else its last artifact's text. A task still working when
//!   the send returns is read again (`GetTask`) until it is not, within the profile's
//!   `prompt_timeout_ms`. `failed`, `rejected`, `canceled` and `auth-required` fail the turn
//!   with the remote's words.
//! - **State across a cold resume:** the remote task's id and context, returned by
//!   [`AgentDriver::take_state`] after the turn that learned them and written with its end.
//! - **Cancel** (an interrupt): `CancelTask`, and the next turn starts a new remote task (A2A
//!   cannot stop a turn and keep its task). **Dispose** (a drain): `CancelTask`, so a drained
//!   tree leaves nothing running remotely.
//!
//! Plain `http://` only (the node builds no TLS client for A2A): an `https` agent is reached
//! through a local proxy.

use std::time::Duration;

use a2a::{
    CancelTaskRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest,
    SendMessageResponse, Task, TaskState, TRANSPORT_PROTOCOL_JSONRPC,
};
use a2a_client::jsonrpc::JsonRpcTransport;
use a2a_client::A2AClient;
use lineage_core::ids::SessionId;
use lineage_core::log::SessionEvent;
use serde::{Deserialize, Serialize};

use crate::driver::{AgentDriver, BoxFuture, DriverAction, DriverStart, TurnInput};
use crate::error::DriverError;
use crate::profiles::AgentProfile;

/// The log kind of a driver's state (`lineage_core::journal::JournalEvent::DriverState`).
const STATE_EVENT: &str = "driver/state";
/// How often a task still working is read again.
const POLL: Duration = Duration::from_millis(200);
/// How long a cancel of the remote task may take.
const CANCEL_WITHIN: Duration = Duration::from_secs(5);

/// Exactly what to reach for an A2A agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aLaunch {
    /// The agent's base URL (its card is under it).
    pub url: String,
    /// The bearer token, when the remote wants one (from the node's environment).
    pub token: Option<String>,
    /// How long one turn may take.
    pub prompt_timeout_ms: u64,
}

/// The remote task a session talks to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteTask {
    /// Its id.
    pub task: String,
    /// Its context.
    pub context: String,
}

/// Checks an `a2a` profile: a `url` that is `http://host...`, no program, no lineage tools
/// (the remote agent does not speak MCP to this node); `(key, why)` otherwise.
pub fn check_profile(p: &AgentProfile) -> Result<(), (&'static str, String)> {
    let Some(url) = &p.url else {
        return Err((
            "url",
            "an a2a profile needs the remote agent's base URL (url = \"http://host:port/path\")"
                .into(),
        ));
    };
    if !url.starts_with("http://") || url.len() <= "http://".len() {
        return Err((
            "url",
            format!(
                "{url:?} is not an http:// URL (https agents are reached through a local proxy)"
            ),
        ));
    }
    if !p.command.is_empty() || !p.args.is_empty() {
        return Err((
            "command",
            "an a2a profile runs no program here; remove command/args".into(),
        ));
    }
    if p.tools {
        return Err((
            "tools",
            "a remote A2A agent does not get lineage's tools (they are served to local agents); remove tools = true".into(),
        ));
    }
    match &p.bearer_env {
        Some(name) if name.is_empty() || name.contains('=') || name.contains('\0') => Err((
            "bearer_env",
            format!("{name:?} is not an environment variable name"),
        )),
        _ => Ok(()),
    }
}

/// The remote task named by the last `driver/state` in `log` (none after a cancel let it go).
pub fn remote_task_in(log: &[SessionEvent]) -> Option<RemoteTask> {
    let last = log.iter().rev().find(|e| e.kind == STATE_EVENT)?;
    serde_json::from_value::<Option<RemoteTask>>(last.data["a2a"].clone()).ok()?
}

/// The text a finished task answers with: its status message, else its last artifact.
pub fn reply_of(task: &Task) -> Option<String> {
    let text_of = |parts: &[Part]| {
        let texts: Vec<&str> = parts.iter().filter_map(Part::as_text).collect();
        (!texts.is_empty()).then(|| texts.join("\n"))
    };
    task.status
        .message
        .as_ref()
        .and_then(|m| text_of(&m.parts))
        .or_else(|| {
            task.artifacts
                .as_ref()?
                .last()
                .and_then(|a| text_of(&a.parts))
        })
}

/// What a turn makes of the remote task as it stands: done with a reply, a failure, or still
/// going.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The turn's reply (none when the remote said nothing).
    Replied(Option<String>),
    /// The turn fails: why.
    Failed(String),
    /// Read it again.
    Working,
}

/// The verdict on `task` (pure).
pub fn verdict(task: &Task) -> Verdict {
    let words = || reply_of(task).unwrap_or_else(|| "no reason given".into());
    match task.status.state {
        TaskState::Completed | TaskState::InputRequired => Verdict::Replied(reply_of(task)),
        TaskState::Submitted | TaskState::Working => Verdict::Working,
        TaskState::Failed => {
            Verdict::Failed(format!("the remote task {} failed: {}", task.id, words()))
        }
        TaskState::Rejected => Verdict::Failed(format!(
            "the remote agent rejected task {}: {}",
            task.id,
            words()
        )),
        TaskState::Canceled => Verdict::Failed(format!("the remote task {} was canceled", task.id)),
        TaskState::AuthRequired => Verdict::Failed(format!(
            "the remote task {} needs authorization the node cannot give: {}",
            task.id,
            words()
        )),
        TaskState::Unspecified => {
            Verdict::Failed(format!("the remote task {} has no state", task.id))
        }
    }
}

/// A session's remote A2A agent.
pub struct A2aDriver {
    launch: A2aLaunch,
    session: String,
    client: Option<A2AClient<JsonRpcTransport>>,
    task: Option<RemoteTask>,
    /// The task learned in the last turn, not yet written.
    changed: bool,
}

impl A2aDriver {
    /// A driver for `launch`, not started.
    pub fn new(launch: A2aLaunch, session: &SessionId) -> Self {
        A2aDriver {
            launch,
            session: session.to_string(),
            client: None,
            task: None,
            changed: false,
        }
    }

    fn failed(&self, reason: impl Into<String>) -> DriverError {
        DriverError::Agent {
            session: self.session.clone(),
            reason: reason.into(),
        }
    }

    /// Connects: the card, then a client of its JSON-RPC interface.
    async fn connect(&self) -> Result<A2AClient<JsonRpcTransport>, DriverError> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &self.launch.token {
            let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| self.failed("the bearer token is not a valid header value"))?;
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(Duration::from_millis(self.launch.prompt_timeout_ms))
            .build()
            .map_err(|e| self.failed(format!("cannot make an HTTP client: {e}")))?;
        let card = a2a_client::agent_card::AgentCardResolver::new(Some(http.clone()))
            .resolve(&self.launch.url)
            .await
            .map_err(|e| {
                self.failed(format!(
                    "the A2A agent at {} has no card it can read ({}); check the profile's url",
                    self.launch.url, e.message
                ))
            })?;
        let endpoint = card
            .supported_interfaces
            .iter()
            .find(|i| i.protocol_binding == TRANSPORT_PROTOCOL_JSONRPC)
            .map(|i| i.url.clone())
            .ok_or_else(|| {
                self.failed(format!(
                    "the A2A agent {} offers no JSON-RPC interface (lineage speaks JSON-RPC)",
                    card.name
                ))
            })?;
        Ok(A2AClient::new(JsonRpcTransport::new(http, endpoint)))
    }

    /// One turn: the message, then reads until the task is no longer working.
    async fn send(&mut self, input: TurnInput) -> Result<Vec<DriverAction>, DriverError> {
        let Some(client) = &self.client else {
            return Err(DriverError::Internal("a turn before start".into()));
        };
        let text = input
            .messages
            .iter()
            .map(crate::acp::text::render_message)
            .collect::<Vec<_>>()
            .join("\n\n");
        let mut message = Message::new(Role::User, vec![Part::text(text)]);
        message.message_id = format!("{}-turn-{}", self.session, input.turn_index);
        message.task_id = self.task.as_ref().map(|t| t.task.clone());
        message.context_id = self.task.as_ref().map(|t| t.context.clone());
        let request = SendMessageRequest {
            message,
            configuration: None,
            metadata: None,
            tenant: None,
        };
        let sent = client.send_message(&request).await.map_err(|e| {
            self.failed(format!("SendMessage to {}: {}", self.launch.url, e.message))
        })?;
        let mut task = match sent {
            SendMessageResponse::Message(m) => {
                let text: Vec<&str> = m.parts.iter().filter_map(Part::as_text).collect();
                return Ok(vec![DriverAction::Reply(text.join("\n"))]);
            }
            SendMessageResponse::Task(task) => task,
        };
        let learned = RemoteTask {
            task: task.id.to_string(),
            context: task.context_id.clone(),
        };
        if self.task.as_ref() != Some(&learned) {
            self.task = Some(learned);
            self.changed = true;
        }
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.launch.prompt_timeout_ms);
        loop {
            match verdict(&task) {
                Verdict::Replied(Some(text)) => return Ok(vec![DriverAction::Reply(text)]),
                Verdict::Replied(None) => return Ok(Vec::new()),
                Verdict::Failed(why) => return Err(self.failed(why)),
                Verdict::Working if tokio::time::Instant::now() >= deadline => {
                    return Err(self.failed(format!(
                        "the remote task {} still works after {} ms (the profile's prompt_timeout_ms)",
                        task.id, self.launch.prompt_timeout_ms
                    )))
                }
                Verdict::Working => {
                    tokio::time::sleep(POLL).await;
                    task = client
                        .get_task(&GetTaskRequest {
                            id: task.id.clone(),
                            history_length: Some(0),
                            tenant: None,
                        })
                        .await
                        .map_err(|e| self.failed(format!("GetTask {}: {}", task.id, e.message)))?;
                }
            }
        }
    }

    /// Cancels the remote task (best effort, bounded): whether the remote said yes.
    async fn cancel_remote(&self) -> bool {
        let (Some(client), Some(task)) = (&self.client, &self.task) else {
            return false;
        };
        let request = CancelTaskRequest {
            id: task.task.clone(),
            metadata: None,
            tenant: None,
        };
        match tokio::time::timeout(CANCEL_WITHIN, client.cancel_task(&request)).await {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                tracing::info!(session = %self.session, task = %task.task, error = %e.message, "the remote task was not cancelled");
                false
            }
            Err(_) => {
                tracing::info!(session = %self.session, task = %task.task, "the remote task's cancel did not answer in time");
                false
            }
        }
    }
}

impl AgentDriver for A2aDriver {
    fn start<'a>(&'a mut self, start: DriverStart) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async move {
            self.task = remote_task_in(&start.log);
            self.client = Some(self.connect().await?);
            Ok(())
        })
    }

    fn turn<'a>(
        &'a mut self,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<Vec<DriverAction>, DriverError>> {
        Box::pin(self.send(input))
    }

    fn take_state(&mut self) -> Option<serde_json::Value> {
        std::mem::take(&mut self.changed).then(|| serde_json::json!({ "a2a": self.task }))
    }

    fn dispose<'a>(&'a mut self) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if self.cancel_remote().await {
                tracing::info!(session = %self.session, "the remote A2A task was cancelled with its session");
            }
        })
    }

    /// A2A has no way to stop a turn and keep its task: the task is cancelled, and the next
    /// turn starts a new one (a cancelled task takes no more messages).
    fn cancel<'a>(&'a mut self) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.cancel_remote().await;
            if self.task.take().is_some() {
                self.changed = true;
            }
        })
    }

    fn shutdown<'a>(&'a mut self) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.client = None;
        })
    }
}

#[cfg(test)]
mod tests;
