//! The A2A operations of one profile's agent (A1), over the cluster: each reads the registry
//! and the session's event log, never the gateway's memory, so any gateway answers for any
//! task, and a task outlives the node (and the gateway) that started it.
//!
//! `SendMessage` spawns a root of the profile (the message id is the spawn's request id: a
//! retry is the same task) or, with a `taskId` (or a `contextId`) of a live root, sends it a
//! followup under the same id; it answers when the turn that took the message ends (or at
//! once with `returnImmediately`). Streaming and `SubscribeToTask` follow the log
//! ([`super::follow`]). `CancelTask` drains the task's subtree, children first.
//! Push notification configs are [`super::push`]'s.

use std::sync::Arc;
use std::time::Duration;

use a2a::{
    A2AError, AgentCard, CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest, GetTaskPushNotificationConfigRequest, GetTaskRequest,
    ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
    ListTasksRequest, ListTasksResponse, Message, Role, SendMessageRequest, SendMessageResponse,
    StreamResponse, SubscribeToTaskRequest, Task, TaskPushNotificationConfig,
};
use a2a_server::{RequestHandler, ServiceParams};
use async_trait::async_trait;
use futures::stream::BoxStream;
use lineage_bus::control::ControlError;
use lineage_bus::events::{EventLogStore, LogCursor};
use lineage_bus::ControlClient;
use lineage_core::ids::{RequestId, SessionId};
use lineage_protocol::agent::AgentSpec;
use lineage_protocol::control::{FollowupRequest, SpawnRequest};
use lineage_protocol::envelope::ErrorCode;
use lineage_registry::listing::ListFilter;
use lineage_registry::{Consistency, RegistryClient, SessionRecord};

use super::follow::{self, Until};
use super::task::{task, TaskLog, TaskParts};

/// How many times a followup the cluster could not take now is sent again, and how far apart:
/// long enough for a dead node's lease to lapse and its session to resume elsewhere.
const FOLLOWUP_RETRIES: u32 = 30;
const FOLLOWUP_PAUSE: Duration = Duration::from_millis(500);

/// How often a wait reads the log again.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// What every agent of the gateway shares: the cluster.
pub(crate) struct Cluster {
    pub(crate) control: ControlClient,
    pub(crate) registry: RegistryClient,
    pub(crate) logs: EventLogStore,
    /// The push notification configs (and what each was sent).
    pub(crate) push: super::push::store::PushStore,
    /// Whether push URLs on loopback and private networks are allowed (`--push-allow-private`).
    pub(crate) push_allow_private: bool,
    /// How long a blocking `SendMessage` (or a stream) waits for its turn.
    pub(crate) turn_timeout: Duration,
}

/// One profile's agent.
pub(crate) struct Agent {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) profile: String,
}

/// A task as read now: its record, folded log, and where the log stands.
pub(crate) struct Read {
    pub(crate) record: SessionRecord,
    pub(crate) log: TaskLog,
    pub(crate) cursor: LogCursor,
}

/// A control error as an A2A error, its one line kept.
fn control_error(e: ControlError) -> A2AError {
    match e.code {
        ErrorCode::BadRequest | ErrorCode::Refused => A2AError::invalid_params(e.message),
        ErrorCode::NotFound => A2AError::new(a2a::error_code::TASK_NOT_FOUND, e.message),
        ErrorCode::Unavailable | ErrorCode::Internal => A2AError::internal(e.message),
    }
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> A2AError {
    A2AError::internal(format!("{what}: {e}"))
}

/// A task id as a session id; a task that cannot exist otherwise.
fn session_of(id: &str) -> Result<SessionId, A2AError> {
    SessionId::parse(id).map_err(|_| {
        A2AError::new(
            a2a::error_code::TASK_NOT_FOUND,
            format!("task {id} not found: a lineage task id is a session id (UUID or ULID)"),
        )
    })
}

/// The text of a user message: its text parts, one a line; one line for anything else.
pub(crate) fn text_of(message: &Message) -> Result<String, A2AError> {
    if message.role != Role::User {
        return Err(A2AError::invalid_params(
            "message.role must be ROLE_USER: an agent's message is not a prompt",
        ));
    }
    let mut lines = Vec::new();
    for (i, part) in message.parts.iter().enumerate() {
        match part.as_text() {
            Some(text) => lines.push(text),
            None => {
                return Err(A2AError::new(
                    a2a::error_code::CONTENT_TYPE_NOT_SUPPORTED,
                    format!("message.parts[{i}] is not text; lineage agents take text parts only"),
                ))
            }
        }
    }
    let text = lines.join("\n");
    match text.trim().is_empty() {
        true => Err(A2AError::invalid_params(
            "the message has no text; send at least one non-empty text part",
        )),
        false => Ok(text),
    }
}

impl Read {
    /// The task's state now (no tree read: what a check before an operation needs).
    pub(crate) fn state(&self) -> a2a::TaskState {
        super::task::task_state(self.record.state, self.record.stop_reason, &self.log)
    }
}

impl Cluster {
    /// The task's record, log and cursor; `TaskNotFound` for a session the registry lacks.
    pub(crate) async fn read(&self, id: &str) -> Result<Read, A2AError> {
        let session = session_of(id)?;
        let record = self.record(&session).await?;
        let (events, cursor) = self
            .logs
            .read(&session)
            .await
            .map_err(|e| unavailable("reading the task's log", e))?;
        Ok(Read {
            record,
            log: TaskLog::of(&events),
            cursor,
        })
    }

    /// The session's record; `TaskNotFound` when there is none.
    pub(crate) async fn record(&self, session: &SessionId) -> Result<SessionRecord, A2AError> {
        self.registry
            .session(session.clone(), Consistency::Linearizable)
            .await
            .map_err(|e| unavailable("reading the registry", e))?
            .ok_or_else(|| A2AError::task_not_found(session.as_str()))
    }

    /// `metadata.lineage` of a task: its session, parent, root, node, state and the tree of
    /// its descendants (the lineage A2A itself lacks).
    pub(crate) async fn lineage(&self, record: &SessionRecord) -> serde_json::Value {
        let id = record.header.id().clone();
        let subtree = self
            .registry
            .subtree(id.clone(), Consistency::Linearizable)
            .await
            .unwrap_or_default();
        let mut meta = node_json(record);
        meta["children"] = children_json(&id, &subtree);
        meta
    }

    /// The A2A task of a read.
    pub(crate) async fn task_of(&self, read: &Read, history_length: Option<i32>) -> Task {
        let lineage = self.lineage(&read.record).await;
        task(TaskParts {
            session: read.record.header.id().as_str(),
            root: read.record.header.root_session().as_str(),
            state: read.record.state,
            stop_reason: read.record.stop_reason,
            log: &read.log,
            lineage,
            history_length: history_length.map(|n| n.max(0) as usize),
        })
    }
}

/// One session in `metadata.lineage`.
fn node_json(record: &SessionRecord) -> serde_json::Value {
    serde_json::json!({
        "session": record.header.id(),
        "parent": record.header.parent_session(),
        "root": record.header.root_session(),
        "state": record.state.as_str(),
        "stop_reason": record.stop_reason.map(|r| r.as_str()),
        "label": lineage_registry::listing::label_of(record),
        "node": record.placement.as_ref().map(|p| p.node.to_string()),
    })
}

/// The children of `parent` in `subtree`, each with its own.
fn children_json(parent: &SessionId, subtree: &[SessionRecord]) -> serde_json::Value {
    subtree
        .iter()
        .filter(|r| r.header.parent_session() == Some(parent))
        .map(|r| {
            let mut child = node_json(r);
            child["children"] = children_json(r.header.id(), subtree);
            child
        })
        .collect()
}

impl Agent {
    /// Starts a task, or sends the message to the live root `task_id`/`context_id` names.
    /// Returns the task's session and the request id its turn is found by (`None`: the first
    /// prompt, turn 0).
    async fn deliver(
        &self,
        req: &SendMessageRequest,
    ) -> Result<(SessionId, Option<String>), A2AError> {
        let text = text_of(&req.message)?;
        let request_id = RequestId::parse(&req.message.message_id).map_err(|_| {
            A2AError::invalid_params(format!(
                "message.messageId {:?} is not 1 to 64 ASCII letters, digits, '-' or '_'; lineage uses it as the request's idempotency key",
                req.message.message_id
            ))
        })?;
        let named = match (&req.message.task_id, &req.message.context_id) {
            (Some(task), _) => Some(task.as_str().to_owned()),
            (None, Some(context)) => Some(context.clone()),
            (None, None) => None,
        };
        let Some(named) = named else {
            let reply = self
                .cluster
                .control
                .spawn(&spawn_request(&self.profile, text, request_id))
                .await
                .map_err(control_error)?;
            return Ok((reply.session, None));
        };
        let session = session_of(&named)?;
        let read = self.cluster.read(session.as_str()).await?;
        if let Some(parent) = read.record.header.parent_session() {
            return Err(A2AError::invalid_params(format!(
                "task {session} is a child of {parent} in the lineage tree; send messages to its root task {}",
                read.record.header.root_session()
            )));
        }
        if read.log.profile.as_deref() != Some(self.profile.as_str()) {
            return Err(A2AError::invalid_params(format!(
                "task {session} is not a task of agent {} (it runs {}); send it to its own agent",
                self.profile,
                read.log.profile.as_deref().unwrap_or("no profile")
            )));
        }
        if let Some(context) = &req.message.context_id {
            if context != read.record.header.root_session().as_str() {
                return Err(A2AError::invalid_params(format!(
                    "contextId {context} is not the context of task {session} ({}); leave it out or give the task's",
                    read.record.header.root_session()
                )));
            }
        }
        let state = read.state();
        if state.is_terminal() {
            return Err(A2AError::unsupported_operation(format!(
                "task {session} is {}; it takes no more messages: send one without taskId for a new task",
                state_name(&state)
            )));
        }
        let followup = FollowupRequest {
            session: session.clone(),
            content: text,
            request_id: Some(request_id.clone()),
        };
        // The task's node may have just died: until its lease lapses nobody resumes the
        // session elsewhere. The request id makes asking again safe (taken once).
        let mut sent = self.cluster.control.followup(&followup).await;
        for _ in 0..FOLLOWUP_RETRIES {
            match &sent {
                Err(e) if e.code == ErrorCode::Unavailable => {
                    tokio::time::sleep(FOLLOWUP_PAUSE).await;
                    sent = self.cluster.control.followup(&followup).await;
                }
                _ => break,
            }
        }
        sent.map_err(control_error)?;
        Ok((session, Some(request_id.as_str().to_owned())))
    }
}

/// The wire name of a state.
pub(crate) fn state_name(state: &a2a::TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{state:?}"))
}

/// A root of `profile` whose first turn takes `text` (the node's `limits.idle_root_ms` ends a
/// task nobody writes to any more).
fn spawn_request(profile: &str, text: String, request_id: RequestId) -> SpawnRequest {
    SpawnRequest {
        request_id: Some(request_id),
        ..SpawnRequest::new(
            AgentSpec::Profile {
                profile: profile.to_owned(),
            },
            text,
        )
    }
}

#[async_trait]
impl RequestHandler for Agent {
    async fn send_message(
        &self,
        _params: &ServiceParams,
        req: SendMessageRequest,
    ) -> Result<SendMessageResponse, A2AError> {
        let (session, request) = self.deliver(&req).await?;
        let config = req.configuration.as_ref();
        let history = config.and_then(|c| c.history_length);
        if !config.and_then(|c| c.return_immediately).unwrap_or(false) {
            follow::wait(&self.cluster, &session, request.as_deref()).await?;
        }
        let read = self.cluster.read(session.as_str()).await?;
        Ok(SendMessageResponse::Task(
            self.cluster.task_of(&read, history).await,
        ))
    }

    async fn send_streaming_message(
        &self,
        _params: &ServiceParams,
        req: SendMessageRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        let (session, request) = self.deliver(&req).await?;
        Ok(follow::stream(self.cluster.clone(), session, Until::TurnOf(request)).await)
    }

    async fn get_task(
        &self,
        _params: &ServiceParams,
        req: GetTaskRequest,
    ) -> Result<Task, A2AError> {
        let read = self.cluster.read(req.id.as_str()).await?;
        Ok(self.cluster.task_of(&read, req.history_length).await)
    }

    async fn list_tasks(
        &self,
        _params: &ServiceParams,
        req: ListTasksRequest,
    ) -> Result<ListTasksResponse, A2AError> {
        super::list::list(&self.cluster, &self.profile, req).await
    }

    async fn cancel_task(
        &self,
        _params: &ServiceParams,
        req: CancelTaskRequest,
    ) -> Result<Task, A2AError> {
        let read = self.cluster.read(req.id.as_str()).await?;
        let state = read.state();
        if state.is_terminal() {
            return Err(A2AError::new(
                a2a::error_code::TASK_NOT_CANCELABLE,
                format!(
                    "task {} is {} already; nothing to cancel",
                    req.id,
                    state_name(&state)
                ),
            ));
        }
        let session = read.record.header.id().clone();
        self.cluster
            .control
            .drain(vec![session.clone()])
            .await
            .map_err(control_error)?;
        let read = self.cluster.read(session.as_str()).await?;
        Ok(self.cluster.task_of(&read, None).await)
    }

    async fn subscribe_to_task(
        &self,
        _params: &ServiceParams,
        req: SubscribeToTaskRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        let read = self.cluster.read(req.id.as_str()).await?;
        let state = read.state();
        if state.is_terminal() {
            return Err(A2AError::unsupported_operation(format!(
                "task {} is {}; nothing more will happen to it (GetTask reads it)",
                req.id,
                state_name(&state)
            )));
        }
        let session = read.record.header.id().clone();
        Ok(follow::stream(self.cluster.clone(), session, Until::Settled).await)
    }

    async fn create_push_config(
        &self,
        _params: &ServiceParams,
        req: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        self.create_push(req).await
    }

    async fn get_push_config(
        &self,
        _params: &ServiceParams,
        req: GetTaskPushNotificationConfigRequest,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        self.get_push(req.task_id.as_str(), &req.id).await
    }

    async fn list_push_configs(
        &self,
        _params: &ServiceParams,
        req: ListTaskPushNotificationConfigsRequest,
    ) -> Result<ListTaskPushNotificationConfigsResponse, A2AError> {
        Ok(ListTaskPushNotificationConfigsResponse {
            configs: self.list_push(req.task_id.as_str()).await?,
            next_page_token: None,
        })
    }

    async fn delete_push_config(
        &self,
        _params: &ServiceParams,
        req: DeleteTaskPushNotificationConfigRequest,
    ) -> Result<(), A2AError> {
        self.delete_push(req.task_id.as_str(), &req.id).await
    }

    async fn get_extended_agent_card(
        &self,
        _params: &ServiceParams,
        _req: GetExtendedAgentCardRequest,
    ) -> Result<AgentCard, A2AError> {
        Err(A2AError::extended_card_not_configured())
    }
}

/// The filter of a `ListTasks`: a context's tree, or every top-level session.
pub(crate) fn filter_of(req: &ListTasksRequest) -> Result<ListFilter, A2AError> {
    let root = match &req.context_id {
        Some(c) => Some(SessionId::parse(c).map_err(|_| {
            A2AError::invalid_params(format!(
                "contextId {c} is not a lineage context: a context id is its root task's id (UUID or ULID)"
            ))
        })?),
        None => None,
    };
    Ok(ListFilter {
        root,
        ..ListFilter::default()
    })
}
