//! A running agent: its process, connection and ACP session, and what a turn does with them.
//!
//! Each turn is one `session/prompt` whose text blocks are the turn's messages; the streamed
//! `agent_message_chunk` updates are joined into the reply. Prompts left unanswered by an
//! abandoned turn are cancelled and wound down first, and their late updates never reach a
//! later reply. Permission requests are answered per [`PermissionPolicy`].

use std::time::Duration;

use agent_client_protocol::util::MatchDispatch;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, ContentChunk, PermissionOptionKind, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionNotification, SessionUpdate, StopReason, ToolKind,
};
use agent_client_protocol::v1::{ActiveSession, ConnectionTo, SessionMessage};
use agent_client_protocol::Agent;
use tokio::task::JoinHandle;

use super::process::Process;
use super::text::{agent_error, one_line, render_message, sdk_error};
use super::PermissionPolicy;
use crate::driver::{ActionOutcome, DriverAction, TurnAction, TurnCtx, TurnInput};
use crate::error::DriverError;
use lineage_core::permission::{decide, PermissionDecision};
use lineage_core::usage::SessionUsage;

/// A running agent: its process, connection and session.
#[derive(Debug)]
pub(super) struct Live {
    /// The hosted lineage session, for logs and error messages.
    pub(super) session: String,
    /// The agent program, for error messages.
    pub(super) program: String,
    pub(super) process: Process,
    pub(super) connection: ConnectionTo<Agent>,
    pub(super) active: ActiveSession<'static, Agent>,
    /// Ends the connection's foreground (and so the connection) when sent or dropped.
    pub(super) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(super) task: JoinHandle<()>,
    /// Prompts sent whose `session/prompt` response has not been read yet.
    pub(super) unanswered: usize,
    /// Earlier conversation to prepend to the next prompt (cold resume without `session/load`).
    pub(super) replay: Option<String>,
    /// True when the session was restored with `session/load`.
    pub(super) loaded: bool,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Live {
    /// A one-line driver error about this agent.
    fn error(&self, what: &str) -> DriverError {
        agent_error(&self.session, &self.program, what)
    }

    /// A one-line driver error for a connection that broke, with the process's exit status and
    /// last stderr line when known.
    async fn broken(&mut self, what: &str) -> DriverError {
        let mut detail = one_line(what);
        detail.push_str(&self.process.exit_detail().await);
        self.error(&detail)
    }

    /// Runs one prompt turn: the turn's messages (after a pending replay) as one
    /// `session/prompt`, the streamed reply collected (and passed to `ctx`'s output as it
    /// comes) until the agent answers or `timeout` passes (then the prompt is cancelled and the
    /// turn fails).
    pub(super) async fn prompt(
        &mut self,
        input: TurnInput,
        timeout: Duration,
        permissions: &PermissionPolicy,
        ctx: Option<&TurnCtx>,
    ) -> Result<Vec<DriverAction>, DriverError> {
        let mut blocks: Vec<ContentBlock> = Vec::new();
        if let Some(replay) = self.replay.take() {
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
        let mut stale = self.unanswered;
        if let Err(e) = self.active.send_prompt_blocks(blocks) {
            let what = format!("cannot send session/prompt: {}", sdk_error(&e));
            return Err(self.broken(&what).await);
        }
        self.unanswered += 1;

        let deadline = tokio::time::Instant::now() + timeout;
        let mut reply = String::new();
        let mut usage = None;
        let outcome = loop {
            let message = match tokio::time::timeout_at(deadline, self.active.read_update()).await {
                Err(_) => break Err(None),
                Ok(Err(e)) => {
                    break Err(Some(format!("the session stream broke: {}", sdk_error(&e))))
                }
                Ok(Ok(message)) => message,
            };
            match message {
                SessionMessage::Message(dispatch) => match absorb(dispatch, permissions).await {
                    Absorbed::Text(text) if stale == 0 => {
                        if let Some(ctx) = ctx {
                            ctx.output(&text);
                        }
                        reply.push_str(&text);
                    }
                    Absorbed::Usage(u) if stale == 0 => usage = Some(u),
                    Absorbed::Text(_) | Absorbed::Usage(_) | Absorbed::Nothing => {}
                },
                SessionMessage::PromptResponse(result) => {
                    self.unanswered = self.unanswered.saturating_sub(1);
                    if stale > 0 {
                        stale -= 1;
                        continue;
                    }
                    break Ok(result);
                }
                _ => {}
            }
        };
        // The turn's last reported usage is recorded once, whatever the turn's outcome.
        if let (Some(ctx), Some(u)) = (ctx, usage) {
            if let ActionOutcome::Refused(e) = ctx.act(TurnAction::Usage(u)).await {
                tracing::debug!(session = %self.session, error = %e, "usage not recorded");
            }
        }
        match outcome {
            Err(None) => {
                let cancel = self
                    .connection
                    .send_notification(CancelNotification::new(self.active.session_id().clone()));
                drop(cancel);
                Err(self.error(&format!(
                    "it did not finish the turn within {} ms; the turn was cancelled",
                    timeout.as_millis()
                )))
            }
            Err(Some(what)) => Err(self.broken(&what).await),
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
                        session = %self.session,
                        stop_reason = ?response.stop_reason,
                        "ACP agent stopped early; its reply may be truncated"
                    );
                    vec![DriverAction::Reply(reply)]
                }
                _ => vec![DriverAction::Reply(reply)],
            }),
        }
    }

    /// Sends `session/cancel` when a prompt is unanswered, then waits up to `grace` for the
    /// agent to answer it (see [`Live::drain`]).
    pub(super) async fn cancel(&mut self, grace: Duration) {
        if self.unanswered == 0 {
            return;
        }
        let sent = self
            .connection
            .send_notification(CancelNotification::new(self.active.session_id().clone()));
        if let Err(e) = sent {
            tracing::debug!(session = %self.session, error = %one_line(&sdk_error(&e)), "cannot send session/cancel");
            return;
        }
        self.drain(grace).await;
    }

    /// Reads and discards the session's updates until every sent prompt was answered, or
    /// `grace` passed. Permission requests met meanwhile are answered `cancelled`.
    async fn drain(&mut self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        while self.unanswered > 0 {
            match tokio::time::timeout_at(deadline, self.active.read_update()).await {
                Ok(Ok(SessionMessage::PromptResponse(_))) => self.unanswered -= 1,
                Ok(Ok(SessionMessage::Message(dispatch))) => {
                    drop(absorb(dispatch, &PermissionPolicy::Deny).await);
                }
                Ok(Ok(_)) => {}
                Ok(Err(_)) | Err(_) => {
                    tracing::debug!(
                        session = %self.session,
                        unanswered = self.unanswered,
                        "ACP agent did not answer cancelled prompts in time"
                    );
                    return;
                }
            }
        }
    }

    /// Ends the connection and stops the process.
    pub(super) async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.process.stop(&self.session).await;
        tracing::info!(session = %self.session, "ACP agent stopped");
    }
}

/// What one session message was, for the turn.
pub(super) enum Absorbed {
    /// Text of an `agent_message_chunk`.
    Text(String),
    /// A `usage_update`.
    Usage(SessionUsage),
    /// Anything else (answered or ignored).
    Nothing,
}

/// Handles one message the agent sent for the session: returns the text of an
/// `agent_message_chunk` or the usage of a `usage_update`, answers a permission request per
/// `policy`, ignores the rest. Malformed messages are logged and ignored.
pub(super) async fn absorb(
    dispatch: agent_client_protocol::v1::Dispatch,
    policy: &PermissionPolicy,
) -> Absorbed {
    let mut text = Absorbed::Nothing;
    let matched = MatchDispatch::new(dispatch.into_raw())
        .if_notification(async |notification: SessionNotification| {
            match notification.update {
                SessionUpdate::AgentMessageChunk(ContentChunk {
                    content: ContentBlock::Text(chunk),
                    ..
                }) => text = Absorbed::Text(chunk.text),
                SessionUpdate::UsageUpdate(u) => {
                    text = Absorbed::Usage(SessionUsage {
                        used_tokens: u.used,
                        size_tokens: Some(u.size),
                        cost_micros: u.cost.as_ref().map(|c| SessionUsage::micros(c.amount)),
                        currency: u.cost.map(|c| c.currency),
                    })
                }
                _ => {}
            }
            Ok(())
        })
        .await
        .if_request(async |request: RequestPermissionRequest, responder| {
            let outcome = permission_outcome(&request, policy).await;
            tracing::info!(
                title = request.tool_call.fields.title.as_deref().unwrap_or(""),
                lineage_tool = lineage_tool(&request).unwrap_or(""),
                outcome = ?outcome,
                "answered a permission request"
            );
            responder.respond(RequestPermissionResponse::new(outcome))
        })
        .await
        .otherwise_ignore();
    if let Err(e) = matched {
        tracing::debug!(error = %one_line(&sdk_error(&e)), "ignored a malformed ACP session message");
    }
    text
}

/// The answer to a permission request under `policy` (C4). Under
/// [`PermissionPolicy::Lineage`] a call to one of lineage's own tools that the session may use
/// is allowed once and anything else is rejected: no human is asked.
async fn permission_outcome(
    request: &RequestPermissionRequest,
    policy: &PermissionPolicy,
) -> RequestPermissionOutcome {
    let allow = match policy {
        PermissionPolicy::Deny => return RequestPermissionOutcome::Cancelled,
        PermissionPolicy::AllowOnce => true,
        PermissionPolicy::Lineage { tools, approver } => {
            let own = lineage_tool(request)
                .is_some_and(|tool| tools.as_ref().is_some_and(|t| t.allows(tool)));
            match (decide(own, approver.is_some()), approver) {
                (PermissionDecision::Allow, _) => true,
                (PermissionDecision::Refuse, _) | (PermissionDecision::AskPerson, None) => false,
                // A root opened through an editor: the person picks (an option the agent
                // offered; anything else is a refusal).
                (PermissionDecision::AskPerson, Some(approver)) => {
                    let picked = ask(approver, request).await;
                    if let Some(option) = request
                        .options
                        .iter()
                        .find(|o| picked.as_deref() == Some(&*o.option_id.to_string()))
                    {
                        return RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                            option.option_id.clone(),
                        ));
                    }
                    false
                }
            }
        }
    };
    let kinds: &[PermissionOptionKind] = match allow {
        true => &[
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ],
        false => &[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ],
    };
    kinds
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

/// Asks the person behind the session's editor; the option id they picked.
async fn ask(approver: &super::Approver, request: &RequestPermissionRequest) -> Option<String> {
    let fields = &request.tool_call.fields;
    let text = |v: serde_json::Value| v.as_str().map(str::to_owned);
    let options = request
        .options
        .iter()
        .map(|o| lineage_protocol::approval::ApprovalOption {
            id: o.option_id.to_string(),
            name: o.name.clone(),
            kind: serde_json::to_value(o.kind)
                .ok()
                .and_then(text)
                .unwrap_or_default(),
        })
        .collect();
    let title = fields
        .title
        .clone()
        .unwrap_or_else(|| "a tool call".to_owned());
    let kind = fields
        .kind
        .and_then(|k| serde_json::to_value(k).ok())
        .and_then(text);
    (approver.0)(title, kind, options).await
}

/// Which of lineage's tools a permission request is for, read from what the harness itself
/// fills in, never from the call's arguments (a shell command may contain any text): Claude
/// Code's `_meta.claudeCode.toolName` (`mcp__lineage__<tool>`), Codex's MCP approval (server
/// `lineage`, its message naming the tool), or a tool call of kind `other`
/// (or none) whose title or name is the tool's (`<tool>`, `mcp__lineage__<tool>`, or Gemini
/// CLI's title of an MCP tool, `<tool> (lineage MCP Server)`). `None`: not one of lineage's tools.
pub(super) fn lineage_tool(request: &RequestPermissionRequest) -> Option<&'static str> {
    let call = &request.tool_call;
    let claude = call
        .meta
        .as_ref()
        .and_then(|m| m.get("claudeCode"))
        .and_then(|c| c.get("toolName"))
        .and_then(|v| v.as_str());
    let plain_kind = matches!(call.fields.kind, None | Some(ToolKind::Other));
    let names = [call.fields.title.as_deref(), call.fields.name.as_deref()];
    let codex = codex_mcp_approval(call.fields.raw_input.as_ref());
    crate::tools::TOOL_NAMES.into_iter().find(|tool| {
        let qualified = format!("mcp__{}__{tool}", super::TOOLS_SERVER_NAME);
        let codex_message = format!(
            "Allow the {} MCP server to run tool \"{tool}\"?",
            super::TOOLS_SERVER_NAME
        );
        let gemini = format!("{tool} ({} MCP Server)", super::TOOLS_SERVER_NAME);
        claude == Some(qualified.as_str())
            || codex == Some(codex_message.as_str())
            || (claude.is_none()
                && codex.is_none()
                && plain_kind
                && names
                    .iter()
                    .flatten()
                    .any(|n| *n == *tool || *n == qualified || *n == gemini))
    })
}

/// Codex's approval of an MCP tool call (`rawInput`: `server_name`, and a `request` whose
/// `_meta.codex_approval_kind` is `mcp_tool_call`): its message, when the server is lineage's.
fn codex_mcp_approval(raw: Option<&serde_json::Value>) -> Option<&str> {
    let raw = raw?;
    let request = raw.get("request")?;
    let kind = request.get("_meta")?.get("codex_approval_kind")?.as_str()?;
    (raw.get("server_name")?.as_str()? == super::TOOLS_SERVER_NAME && kind == "mcp_tool_call")
        .then(|| request.get("message")?.as_str())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(tool_call: serde_json::Value) -> RequestPermissionRequest {
        serde_json::from_value(json!({
            "sessionId": "s",
            "toolCall": tool_call,
            "options": [
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"}
            ]
        }))
        .unwrap()
    }

    /// C4: the shapes the real harnesses send (Claude Code 2.1's `_meta.claudeCode.toolName`,
    /// Codex 0.16's MCP approval, Gemini CLI 0.61's title), and look-alikes that are not.
    #[test]
    fn c4_lineage_tools_are_told_apart_from_look_alikes() {
        let claude = request(
            json!({"toolCallId": "1", "title": "spawn_subagent", "kind": "other",
            "_meta": {"claudeCode": {"toolName": "mcp__lineage__spawn_subagent"}}}),
        );
        assert_eq!(lineage_tool(&claude), Some("spawn_subagent"));
        let codex = request(json!({"toolCallId": "2", "title": "Approve MCP tool call",
            "rawInput": {"server_name": "lineage", "request": {"mode": "form",
                "_meta": {"codex_approval_kind": "mcp_tool_call"},
                "message": "Allow the lineage MCP server to run tool \"report_to_parent\"?"}}}));
        assert_eq!(lineage_tool(&codex), Some("report_to_parent"));
        let gemini = request(
            json!({"toolCallId": "3", "title": "list_children (lineage MCP Server)",
            "kind": "other"}),
        );
        assert_eq!(lineage_tool(&gemini), Some("list_children"));
        let plain = request(json!({"toolCallId": "3", "title": "list_children", "kind": "other"}));
        assert_eq!(lineage_tool(&plain), Some("list_children"));

        for look_alike in [
            // A shell command whose text is a tool's name.
            json!({"toolCallId": "4", "title": "mcp__lineage__spawn_subagent", "kind": "execute"}),
            // Claude Code's Bash tool, titled like lineage's tool.
            json!({"toolCallId": "5", "title": "spawn_subagent",
                "_meta": {"claudeCode": {"toolName": "Bash"}}}),
            // Another MCP server's tool of the same name, through Codex.
            json!({"toolCallId": "6", "title": "Approve MCP tool call",
                "rawInput": {"server_name": "evil", "request": {
                    "_meta": {"codex_approval_kind": "mcp_tool_call"},
                    "message": "Allow the lineage MCP server to run tool \"spawn_subagent\"?"}}}),
            json!({"toolCallId": "7", "title": "Bash", "kind": "other"}),
            // Gemini CLI's shell tool running a command that reads like the MCP title.
            json!({"toolCallId": "8", "title": "spawn_subagent (lineage MCP Server)",
                "kind": "execute"}),
            // Another server's tool of the same name, through Gemini CLI.
            json!({"toolCallId": "9", "title": "spawn_subagent (evil MCP Server)", "kind": "other"}),
        ] {
            assert_eq!(
                lineage_tool(&request(look_alike.clone())),
                None,
                "{look_alike}"
            );
        }
    }

    #[test]
    fn c4_the_rule_allows_the_sessions_own_tools_and_rejects_the_rest() {
        let slot = crate::tools::TurnSlot::default();
        slot.set_tool_filter(Some(vec!["list_children".into()]));
        let rule = PermissionPolicy::Lineage {
            tools: Some(slot),
            approver: None,
        };
        let selected = |r: &RequestPermissionRequest| match futures::executor::block_on(
            permission_outcome(r, &rule),
        ) {
            RequestPermissionOutcome::Selected(s) => s.option_id.to_string(),
            other => format!("{other:?}"),
        };
        let allowed =
            request(json!({"toolCallId": "1", "title": "list_children", "kind": "other"}));
        assert_eq!(selected(&allowed), "allow");
        let filtered =
            request(json!({"toolCallId": "2", "title": "spawn_subagent", "kind": "other"}));
        assert_eq!(selected(&filtered), "reject");
        let shell = request(json!({"toolCallId": "3", "title": "rm -rf /", "kind": "execute"}));
        assert_eq!(selected(&shell), "reject");
        let no_tools = PermissionPolicy::Lineage {
            tools: None,
            approver: None,
        };
        assert!(matches!(
            futures::executor::block_on(permission_outcome(&allowed, &no_tools)),
            RequestPermissionOutcome::Selected(s) if s.option_id.to_string() == "reject"
        ));
        // With a person behind the editor: what they pick, if the agent offered it.
        for (picked, expected) in [
            (Some("allow"), "allow"),
            (Some("made-up"), "reject"),
            (None, "reject"),
        ] {
            let approver =
                super::super::Approver(std::sync::Arc::new(move |title, kind, options| {
                    assert_eq!(title, "rm -rf /");
                    assert_eq!(kind.as_deref(), Some("execute"));
                    assert_eq!(options.len(), 2);
                    Box::pin(async move { picked.map(str::to_owned) })
                }));
            let person = PermissionPolicy::Lineage {
                tools: None,
                approver: Some(approver),
            };
            match futures::executor::block_on(permission_outcome(&shell, &person)) {
                RequestPermissionOutcome::Selected(s) => {
                    assert_eq!(s.option_id.to_string(), expected)
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
