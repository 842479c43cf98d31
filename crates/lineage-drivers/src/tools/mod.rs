//! lineage's delegation tools over MCP (T1–T3, T5): what a hosted agent calls to build its tree.
//!
//! [`DelegationTools`] is an MCP server (the official Rust SDK, `rmcp`) bound to one hosted
//! session. Each tool call becomes a [`TurnAction`] of that session's running turn
//! ([`TurnSlot`]: the driver puts the turn's [`TurnCtx`] there while the turn runs), so a call
//! obeys every rule any spawn, report, followup or interrupt obeys (the host and the engine
//! decide), and its outcome comes back as the tool's result:
//!
//! | tool | action | result |
//! |---|---|---|
//! | `spawn_subagent` | [`TurnAction::Spawn`] of a profile | one-shot: the child's output and stop reason once it settled; continuable: its id at once |
//! | `report_to_parent` | [`TurnAction::Report`] (M1) | `reported` |
//! | `send_to_child` | [`TurnAction::Followup`] (M3) | `delivered` |
//! | `interrupt_child` | [`TurnAction::Interrupt`] (M4, the caller's authority as ancestor) | `interrupted` |
//! | `list_children` | [`TurnAction::ListChildren`] | the children: state, shape, node, label, last report |
//! | `wait_for_children` | [`TurnAction::WaitChildren`] | the reports and settlements that arrived |
//! | `apply_child_changes` | [`TurnAction::ApplyChildChanges`] (issue 39) | the paths changed in your files, or the conflicts (nothing written) |
//!
//! A client that declares MCP's tasks extension gets a one-shot `spawn_subagent` and a
//! `wait_for_children` as tasks instead: a handle at once, then `tasks/get` and `tasks/cancel`
//! ([`tasks`], A3).
//!
//! A refusal (depth exceeded, admission closed, unknown profile, not a child of yours, no turn
//! running) is a tool error (`isError: true`) with one line a model can act on; malformed
//! arguments too. Results are JSON text.
//!
//! How an agent reaches them: [`socket::ToolsSocket`], the node's Unix socket, serves each
//! connection as the session whose grant (a per-session secret) it presents first; the agent
//! starts `lineage mcp` (a stdio bridge to that socket) from the `mcpServers` of its ACP
//! `session/new`. An agent that declares `mcpCapabilities.http` is given [`http`]'s loopback
//! URL instead, with the secret as its bearer token.
//!
//! | file | what |
//! |---|---|
//! | `tools/mod.rs` | [`TurnSlot`], [`DelegationTools`] and its tools |
//! | `tools/args.rs` | each tool's arguments ([`SpawnSubagent`], ...) and their enums ([`Shape`], [`ReportDelivery`], [`WaitFor`]) |
//! | [`socket`] | the node's tools socket: a connection served as the session whose grant it presents |
//! | [`http`] | the loopback HTTP endpoint for agents that take MCP over HTTP |
//! | [`tasks`] | MCP tasks: task ids, their status and result (pure) |
//! | `tools/task_calls.rs` | the calls answered with a task, `tasks/get`, `tasks/cancel` |

mod args;
pub mod http;
pub mod socket;
mod task_calls;
pub mod tasks;

pub use args::{
    ApplyChildChanges, InterruptChild, ListChildren, ReportDelivery, ReportToParent, SendToChild,
    Shape, SpawnSubagent, WaitFor, WaitForChildren, WorkspaceChoice,
};

use std::sync::{Arc, Mutex};

use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{NodeId, SessionId};
use lineage_core::journal::TurnMessage;
use lineage_core::messages::Delivery;
use lineage_core::workspace::changes_sentence;
use lineage_protocol::workspace::SpawnWorkspace;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::{tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde_json::json;

use crate::driver::{ActionOutcome, AgentSpec, ChildSpec, TurnAction, TurnCtx, WaitMode};

/// The names of the delegation tools, in the order they are listed.
pub const TOOL_NAMES: [&str; 7] = [
    "spawn_subagent",
    "report_to_parent",
    "send_to_child",
    "interrupt_child",
    "list_children",
    "wait_for_children",
    "apply_child_changes",
];

/// Where a hosted session's running turn is reachable: set by the driver when a turn begins,
/// cleared when it ends; and which of the tools the session may use (its tool filter, C1, set
/// by the driver before the agent connects). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct TurnSlot(Arc<Mutex<SlotState>>);

#[derive(Debug, Default)]
struct SlotState {
    ctx: Option<TurnCtx>,
    tool_filter: Option<Vec<String>>,
}

impl TurnSlot {
    /// The turn `ctx` runs now.
    pub fn set(&self, ctx: TurnCtx) {
        if let Ok(mut slot) = self.0.lock() {
            slot.ctx = Some(ctx);
        }
    }

    /// No turn runs.
    pub fn clear(&self) {
        if let Ok(mut slot) = self.0.lock() {
            slot.ctx = None;
        }
    }

    /// Restricts the session's tools to those `filter` names (C1); `None`: all of them. Applies
    /// to connections made afterwards (the driver sets it before it opens the agent's session);
    /// a call to a filtered tool is refused whenever it comes.
    pub fn set_tool_filter(&self, filter: Option<Vec<String>>) {
        if let Ok(mut slot) = self.0.lock() {
            slot.tool_filter = filter;
        }
    }

    /// Whether the session may use tool `name`.
    pub fn allows(&self, name: &str) -> bool {
        self.0.lock().ok().is_none_or(|slot| {
            slot.tool_filter
                .as_ref()
                .is_none_or(|filter| filter.iter().any(|f| f == name))
        })
    }

    fn get(&self) -> Option<TurnCtx> {
        self.0.lock().ok().and_then(|slot| slot.ctx.clone())
    }
}

/// The MCP server of one hosted session's delegation tools.
#[derive(Debug, Clone)]
pub struct DelegationTools {
    session: SessionId,
    slot: TurnSlot,
    tool_router: ToolRouter<Self>,
}

impl DelegationTools {
    /// The tools of `session`, acting through whatever turn `slot` holds; only those its tool
    /// filter allows are listed (C1, C4).
    pub fn new(session: SessionId, slot: TurnSlot) -> Self {
        let mut tool_router = Self::tool_router();
        for name in TOOL_NAMES {
            if !slot.allows(name) {
                tool_router.disable_route(name);
            }
        }
        DelegationTools {
            session,
            slot,
            tool_router,
        }
    }

    /// The one-line refusal of a call to `name` when the session's filter leaves it out.
    fn filtered(&self, name: &str) -> Option<String> {
        let known = TOOL_NAMES.contains(&name);
        (known && !self.slot.allows(name)).then(|| {
            let allowed: Vec<&str> = TOOL_NAMES
                .into_iter()
                .filter(|t| self.slot.allows(t))
                .collect();
            format!(
                "tool {name} is not allowed for session {}: its tool filter allows {}; work with those",
                self.session,
                match allowed.is_empty() {
                    true => "none of lineage's tools".to_owned(),
                    false => allowed.join(", "),
                }
            )
        })
    }

    /// The one line for a call while no turn runs.
    fn no_turn(&self) -> String {
        format!(
            "session {} takes no turn now: lineage's tools work only while you answer a prompt",
            self.session
        )
    }

    /// Runs `action` in the session's running turn.
    async fn act(&self, action: TurnAction) -> Result<ActionOutcome, String> {
        let ctx = self.slot.get().ok_or_else(|| self.no_turn())?;
        match ctx.act(action).await {
            ActionOutcome::Refused(why) => Err(why),
            outcome => Ok(outcome),
        }
    }
}

/// A tool's answer: JSON text, or a tool error with one line.
fn answer(result: Result<serde_json::Value, String>) -> Result<CallToolResult, ErrorData> {
    Ok(match result {
        Ok(value) => CallToolResult::success(vec![ContentBlock::text(value.to_string())]),
        Err(why) => CallToolResult::error(vec![ContentBlock::text(why)]),
    })
}

fn session_arg(name: &str, value: &str) -> Result<SessionId, String> {
    SessionId::parse(value).map_err(|e| {
        format!(
            "{name} {value:?} is not a session id ({e}); list_children shows your children's ids"
        )
    })
}

fn message_json(message: &TurnMessage) -> serde_json::Value {
    match message {
        TurnMessage::User { content } => json!({"kind": "user", "text": content}),
        TurnMessage::SubagentReport {
            sender_session_id,
            content,
        } => json!({"kind": "report", "from": sender_session_id, "text": content}),
        TurnMessage::SubagentSettled {
            sender_session_id,
            summary,
            changed,
        } => {
            let mut json = json!({"kind": "settled", "from": sender_session_id, "text": summary});
            if let Some(sentence) = changed.and_then(|n| changes_sentence(sender_session_id, n)) {
                json["changed_paths"] = json!(changed);
                json["changes"] = json!(sentence);
            }
            json
        }
    }
}

/// The child a `spawn_subagent` asks for; one line for a bad node id.
fn child_spec(args: SpawnSubagent) -> Result<ChildSpec, String> {
    let node = args
        .node
        .as_deref()
        .map(NodeId::parse)
        .transpose()
        .map_err(|e| format!("node is not a node id ({e}); omit it to run the child anywhere"))?;
    let shape = match args.shape {
        Shape::OneShot => SubagentShape::OneShot,
        Shape::Continuable => SubagentShape::Continuable,
    };
    Ok(ChildSpec {
        shape,
        agent: AgentSpec::Profile {
            profile: args.profile,
        },
        prompt: args.prompt,
        node,
        label: args.label,
        persona: args.persona,
        tool_filter: args.tool_filter,
        timeout_ms: args.timeout_ms,
        budget: None,
        workspace: args.workspace.map(|w| match w {
            WorkspaceChoice::Inherit => SpawnWorkspace::Inherit,
            WorkspaceChoice::Empty => SpawnWorkspace::Empty,
        }),
        session: None,
    })
}

/// A spawn's answer: a one-shot child's output and stop reason, or a continuable child's id.
fn born_json(outcome: ActionOutcome) -> serde_json::Value {
    match outcome {
        ActionOutcome::Born {
            child,
            result: Some(result),
        } => {
            let mut json = json!({
                "child": child,
                "output": result.output,
                "stop_reason": result.stop_reason.as_str(),
            });
            let changed = result.changes.as_ref().map_or(0, |c| c.changed);
            if let Some(sentence) = changes_sentence(&child, changed) {
                json["changed_paths"] = json!(changed);
                json["changes"] = json!(sentence);
            }
            json
        }
        ActionOutcome::Born {
            child,
            result: None,
        } => json!({
            "child": child,
            "note": "running; its reports and result arrive later: call wait_for_children",
        }),
        other => json!({"outcome": format!("{other:?}")}),
    }
}

/// The children and mode a `wait_for_children` names; one line for a bad child id.
fn wait_args(args: WaitForChildren) -> Result<(Option<Vec<SessionId>>, WaitMode), String> {
    let children = args
        .children
        .map(|list| {
            list.iter()
                .map(|c| session_arg("child", c))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let mode = match args.mode {
        WaitFor::All => WaitMode::All,
        WaitFor::Any => WaitMode::Any,
    };
    Ok((children, mode))
}

#[tool_router(router = tool_router)]
impl DelegationTools {
    /// `spawn_subagent`.
    #[tool(
        name = "spawn_subagent",
        description = "Start a child agent on a task. shape one-shot: waits and returns the child's output when it is done. shape continuable: returns the child's id at once; its reports and final result arrive later (wait_for_children), and send_to_child gives it more work."
    )]
    async fn spawn_subagent(
        &self,
        Parameters(args): Parameters<SpawnSubagent>,
    ) -> Result<CallToolResult, ErrorData> {
        let spec = match child_spec(args) {
            Ok(spec) => spec,
            Err(why) => return answer(Err(why)),
        };
        answer(
            self.act(TurnAction::Spawn(Box::new(spec)))
                .await
                .map(born_json),
        )
    }

    /// `report_to_parent`.
    #[tool(
        name = "report_to_parent",
        description = "Tell your parent agent something now, before you finish (progress, a partial result). delivery wakeup makes the parent act on it; quiet waits for its next turn."
    )]
    async fn report_to_parent(
        &self,
        Parameters(args): Parameters<ReportToParent>,
    ) -> Result<CallToolResult, ErrorData> {
        let delivery = match args.delivery {
            ReportDelivery::Quiet => Delivery::Quiet,
            ReportDelivery::Wakeup => Delivery::Wakeup,
        };
        answer(
            self.act(TurnAction::Report {
                content: args.content,
                delivery,
            })
            .await
            .map(|_| json!({"reported": true})),
        )
    }

    /// `send_to_child`.
    #[tool(
        name = "send_to_child",
        description = "Send a message to one of your continuable children (more work, or an answer to its question). It runs again on it; a finished child is resumed."
    )]
    async fn send_to_child(
        &self,
        Parameters(args): Parameters<SendToChild>,
    ) -> Result<CallToolResult, ErrorData> {
        let child = match session_arg("child", &args.child) {
            Ok(child) => child,
            Err(why) => return answer(Err(why)),
        };
        answer(
            self.act(TurnAction::Followup {
                child,
                content: args.content,
            })
            .await
            .map(|_| json!({"delivered": true})),
        )
    }

    /// `interrupt_child`.
    #[tool(
        name = "interrupt_child",
        description = "Cancel the current turn of one of your children (or of any agent below you). It stops what it is doing and reports that it was interrupted."
    )]
    async fn interrupt_child(
        &self,
        Parameters(args): Parameters<InterruptChild>,
    ) -> Result<CallToolResult, ErrorData> {
        let child = match session_arg("child", &args.child) {
            Ok(child) => child,
            Err(why) => return answer(Err(why)),
        };
        answer(
            self.act(TurnAction::Interrupt { child })
                .await
                .map(|_| json!({"interrupted": true})),
        )
    }

    /// `list_children`.
    #[tool(
        name = "list_children",
        description = "List your children: id, state (running, waiting, settled, disposed), shape, node, label and the last thing each reported."
    )]
    async fn list_children(
        &self,
        Parameters(_args): Parameters<ListChildren>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            self.act(TurnAction::ListChildren)
                .await
                .map(|outcome| match outcome {
                    ActionOutcome::Children(children) => json!({ "children": children }),
                    other => json!({"outcome": format!("{other:?}")}),
                }),
        )
    }

    /// `apply_child_changes`.
    #[tool(
        name = "apply_child_changes",
        description = "Apply a child's changes to your files: what it changed in the copy of your files it started with (added, modified, deleted files). All of them, or none: a file you changed too since is a conflict, listed, and nothing is written."
    )]
    async fn apply_child_changes(
        &self,
        Parameters(args): Parameters<ApplyChildChanges>,
    ) -> Result<CallToolResult, ErrorData> {
        let child = match session_arg("child", &args.child) {
            Ok(child) => child,
            Err(why) => return answer(Err(why)),
        };
        answer(self.act(TurnAction::ApplyChildChanges { child }).await.map(
            |outcome| match outcome {
                ActionOutcome::Applied { changed, already } => json!({
                    "changed": changed
                        .into_iter()
                        .map(|(path, change)| json!({"path": path, "change": change}))
                        .collect::<Vec<_>>(),
                    "already": already,
                }),
                other => json!({"outcome": format!("{other:?}")}),
            },
        ))
    }

    /// `wait_for_children`.
    #[tool(
        name = "wait_for_children",
        description = "Wait for your children's reports and results and receive them here. mode all: until every child waited for has finished; any: until the first message. Returns what arrived by timeout_ms, with complete false if it timed out."
    )]
    async fn wait_for_children(
        &self,
        Parameters(args): Parameters<WaitForChildren>,
    ) -> Result<CallToolResult, ErrorData> {
        let timeout_ms = args.timeout_ms;
        let (children, mode) = match wait_args(args) {
            Ok(parsed) => parsed,
            Err(why) => return answer(Err(why)),
        };
        answer(
            self.act(TurnAction::WaitChildren {
                children,
                mode,
                timeout_ms,
            })
            .await
            .map(|outcome| match outcome {
                ActionOutcome::Arrived { messages, complete } => json!({
                    "complete": complete,
                    "messages": messages.iter().map(message_json).collect::<Vec<_>>(),
                }),
                other => json!({"outcome": format!("{other:?}")}),
            }),
        )
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for DelegationTools {
    /// A call to a tool the session's filter leaves out is refused by the node (C4: whether or
    /// not the agent was shown it), as a one-line tool error; the others go to their tool.
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        if let Some(why) = self.filtered(&request.name) {
            return Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into());
        }
        // A3: a client that takes tasks gets a handle for a long call.
        if context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks())
        {
            if let Some(response) = self.call_as_task(&request).await {
                return Ok(response);
            }
        }
        let call = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    /// `tasks/get` (A3): the task's children read from the registry and their logs.
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        self.read_task(&request.task_id)
            .await
            .map(rmcp::model::GetTaskResult::new)
    }

    /// `tasks/cancel` (A3): interrupts the task's children still working.
    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancel(&request.task_id).await
    }

    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        );
        config.instructions = Some(format!(
            "lineage delegation tools of session {}: start child agents, talk to them, wait for them, report to your parent.",
            self.session
        ));
        config
    }
}
