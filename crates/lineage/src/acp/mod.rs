//! `lineage acp --profile NAME` (F1–F3): an ACP agent on stdio that an editor starts, in front of
//! a lineage cluster.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the verb: connect, serve ACP on stdio; `session/new`, `prompt`, `cancel`, `close` |
//! | [`tree`] | the pure rules of what a client is shown of its trees (`Observed` in, `Emit` out) |
//! | [`feed`] | the bus subscriptions the tree is fed from |
//! | [`show`] | `Emit`s as ACP `session/update` notifications |
//! | [`load`] | `session/load`: the tree from the registry and every session's transcript from its log |
//! | `servers` | the editor's MCP servers a root's agent may get (HTTP only) |
//! | `replay` | a loaded transcript as what each part is (the user's messages, replies, a child's reports and end), pure |
//! | [`approve`] | a root agent's permission requests, asked of the editor (`session/request_permission`) |
//!
//! Each ACP session is a top-level lineage session of the profile, hosted in the cluster and
//! started idle; a prompt is a followup (its request id names it), answered when the turn that
//! took it ends; the turn's text streams back as `agent_message_chunk`s as the hosting node
//! publishes it. A client that declares the `subagents` capability sees every descendant as a
//! subagent session. `session/cancel` interrupts the session's turn (a root with top-level
//! authority, a descendant with the root's); `session/close` drains the tree children first.

pub mod approve;
pub mod feed;
pub mod load;
mod replay;
mod servers;
pub mod show;
pub mod tree;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse, ContentBlock,
    Implementation, InitializeRequest, InitializeResponse, LoadSessionRequest, NewSessionRequest,
    NewSessionResponse, PromptRequest, PromptResponse, SessionCapabilities,
    SessionCloseCapabilities, StopReason,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, ByteStreams, Client, Error, ErrorCode as AcpCode};
use lineage_bus::control::ControlError;
use lineage_bus::ControlClient;
use lineage_core::authority::InterruptAuthority;
use lineage_core::ids::{RequestId, SessionId};
use lineage_core::output::TurnEndOutcome;
use lineage_protocol::agent::AgentSpec;
use lineage_protocol::control::{FollowupRequest, InterruptRequest, SpawnRequest};
use lineage_protocol::envelope::ErrorCode;
use tokio::sync::oneshot;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::global::Global;
use tree::{Emit, FrontTree};

/// `acp` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent profile every session runs (`lineage agents` lists them).
    #[arg(long)]
    pub profile: String,
    /// How long a prompt waits for its turn to end, in seconds.
    #[arg(long, default_value_t = 1800)]
    pub turn_timeout_s: u64,
    /// Upload the editor's project (each session/new's `cwd`, on this machine) as the
    /// session's workspace: its agent starts in those files on whichever node hosts it (what
    /// .gitignore leaves out stays out; refused past the profile's cap).
    #[arg(long)]
    pub project: bool,
    /// The editor's projects under DIR are at the same place under the profile's working
    /// directory on the nodes (a tree they mount there): a session/new whose `cwd` is
    /// DIR/a/b runs its agent in <workdir>/a/b; one outside DIR is refused with one line.
    #[arg(long, value_name = "DIR", conflicts_with = "project")]
    pub map_cwd: Option<std::path::PathBuf>,
}

/// The session's directory under the profile's working directory for the editor's `cwd`,
/// when the editor's projects under `root` are mapped there (`--map-cwd`): the relative rest
/// (`None` for `root` itself), or one line saying why it cannot be.
pub(crate) fn mapped_cwd(
    root: &std::path::Path,
    editor: &std::path::Path,
) -> Result<Option<String>, String> {
    let outside = || {
        format!(
            "the editor's directory {} is not under --map-cwd {}: open a project under it (or run lineage acp --project to upload this one)",
            editor.display(),
            root.display()
        )
    };
    if !editor.is_absolute() {
        return Err(format!(
            "the editor's directory {} is not absolute; ACP gives session/new an absolute cwd",
            editor.display()
        ));
    }
    let rest = editor.strip_prefix(root).map_err(|_| outside())?;
    if rest
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(outside());
    }
    match rest.to_str() {
        Some("") => Ok(None),
        Some(rest) => Ok(Some(rest.to_owned())),
        None => Err(format!(
            "the editor's directory {} is not UTF-8; lineage names directories in UTF-8",
            editor.display()
        )),
    }
}

/// How a prompt's turn ended.
struct TurnResult {
    outcome: TurnEndOutcome,
    error: Option<String>,
}

/// A prompt waiting for its turn: which root, which turn took it (once known), who waits.
struct PromptWait {
    root: SessionId,
    turn: Option<u64>,
    done: Option<oneshot::Sender<TurnResult>>,
}

/// What the handlers and the feed share.
pub(crate) struct Front {
    pub(crate) control: ControlClient,
    pub(crate) nats: async_nats::Client,
    pub(crate) subjects: lineage_bus::Subjects,
    profile: String,
    turn_timeout: Duration,
    /// Upload each session's `cwd` as its workspace (`--project`).
    project: bool,
    /// The editor's directory whose projects the nodes have under the profile's working
    /// directory (`--map-cwd`).
    map_cwd: Option<std::path::PathBuf>,
    pub(crate) tree: Mutex<FrontTree>,
    pub(crate) client: OnceLock<ConnectionTo<Client>>,
    prompts: Mutex<HashMap<String, PromptWait>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A request error carrying a one-line reason.
pub(crate) fn refuse(reason: impl Into<String>) -> Error {
    Error::new(AcpCode::INVALID_PARAMS, reason.into())
}

/// A control error as an ACP error (its code and one line).
fn control_error(e: ControlError) -> Error {
    match e.code {
        ErrorCode::BadRequest | ErrorCode::NotFound | ErrorCode::Refused => {
            Error::new(AcpCode::INVALID_PARAMS, e.message)
        }
        ErrorCode::Unavailable | ErrorCode::Internal => {
            Error::new(AcpCode::INTERNAL_ERROR, e.message)
        }
    }
}

impl Front {
    /// Sends what the tree emitted: notifications to the client; turn starts and ends to the
    /// prompts that wait for them.
    pub(crate) fn emit(&self, emits: Vec<Emit>) {
        for emit in emits {
            match emit {
                Emit::RootTurnStarted {
                    root,
                    turn,
                    request_ids,
                } => {
                    let mut prompts = lock(&self.prompts);
                    for id in request_ids {
                        if let Some(wait) = prompts.get_mut(&id) {
                            if wait.root == root {
                                wait.turn = Some(turn);
                            }
                        }
                    }
                }
                Emit::RootTurnEnded {
                    root,
                    turn,
                    outcome,
                    error,
                } => {
                    let mut prompts = lock(&self.prompts);
                    for wait in prompts.values_mut() {
                        if wait.root == root && wait.turn == Some(turn) {
                            if let Some(done) = wait.done.take() {
                                let _ = done.send(TurnResult {
                                    outcome,
                                    error: error.clone(),
                                });
                            }
                        }
                    }
                }
                other => {
                    if let Some(client) = self.client.get() {
                        show::send(client, other);
                    }
                }
            }
        }
    }

    async fn new_session(&self, request: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        let request_id = RequestId::parse(&uuid::Uuid::now_v7().to_string()).map_err(|e| {
            Error::new(
                AcpCode::INTERNAL_ERROR,
                format!("cannot mint a request id: {e}"),
            )
        })?;
        // Issue 38: the editor's directory, mapped under the profile's working directory
        // (`--map-cwd`), or refused before anything is spawned.
        let cwd = match &self.map_cwd {
            None => None,
            Some(root) => mapped_cwd(root, &request.cwd).map_err(refuse)?,
        };
        // Issue 39: the editor's project as the session's files, when asked (`--project`).
        let (workspace, uploaded) = match self.project {
            false => (None, None),
            true => {
                let (digest, store) = crate::client::upload_workspace(
                    self.nats.clone(),
                    &self.subjects,
                    &request.cwd,
                    &request_id,
                )
                .await
                .map_err(|e| {
                    let line = format!(
                        "the editor's project {}: {}",
                        request.cwd.display(),
                        e.message
                    );
                    control_error(ControlError::new(e.code, line))
                })?;
                (
                    Some(lineage_protocol::workspace::SpawnWorkspace::Uploaded { digest }),
                    Some(store),
                )
            }
        };
        let spawn = SpawnRequest {
            parent: None,
            shape: None,
            agent: AgentSpec::Profile {
                profile: self.profile.clone(),
            },
            prompt: String::new(),
            node: None,
            label: None,
            persona: None,
            tool_filter: None,
            max_depth: None,
            request_id: Some(request_id.clone()),
            // The editor's directory is on the editor's machine; the session runs in the
            // profile's working directory, which the node's operator chooses (T4): with
            // `--map-cwd` in the same place under it, with `--project` in a copy of the
            // editor's files there.
            cwd,
            preset: None,
            // C2, C4: a person is behind this session (the editor's): its agent's permission
            // requests come here (`approve`), and its children's approval policy is `never`.
            policy: Some(lineage_core::policy::ParentPolicyView {
                sandbox_override: None,
                has_approval_service: true,
            }),
            timeout_ms: None,
            budget: None,
            // The node's limits.idle_root_ms, as for any root.
            idle_ttl_ms: None,
            // An editor's root takes turns for its prompts only: its children's reports and
            // settlements wait for the next prompt (no turn streams after `end_turn`, and
            // session/cancel always hits the turn the editor asked for).
            wake_on: Some(lineage_core::engine::WakeOn::Prompts),
            workspace,
            mcp_servers: servers::editor_servers(&request.mcp_servers),
        };
        tracing::debug!(editor_cwd = %request.cwd.display(), "session/new");
        let reply = self.control.spawn(&spawn).await;
        if let Some(store) = uploaded {
            crate::client::remove_upload(&store, &request_id).await;
        }
        let reply = reply.map_err(control_error)?;
        lock(&self.tree).add_root(reply.session.clone());
        tracing::info!(session = %reply.session, node = %reply.node, "ACP session opened");
        Ok(NewSessionResponse::new(reply.session.to_string()))
    }

    fn root(&self, raw: &str) -> Result<SessionId, Error> {
        let id = SessionId::parse(raw).map_err(|e| refuse(format!("session {raw}: {e}")))?;
        match lock(&self.tree).is_root(&id) {
            true => Ok(id),
            false => Err(refuse(format!(
                "session {id} is not open on this connection; create it with session/new or load it with session/load"
            ))),
        }
    }

    async fn prompt(&self, request: PromptRequest) -> Result<PromptResponse, Error> {
        let root = self.root(&request.session_id.to_string())?;
        let text = request
            .prompt
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        if text.trim().is_empty() {
            return Err(refuse(
                "the prompt has no text; lineage passes text blocks on to the session",
            ));
        }
        let id = uuid::Uuid::now_v7().to_string();
        let request_id = RequestId::parse(&id).map_err(|e| {
            Error::new(
                AcpCode::INTERNAL_ERROR,
                format!("cannot mint a request id: {e}"),
            )
        })?;
        let (done, wait) = oneshot::channel();
        lock(&self.prompts).insert(
            id.clone(),
            PromptWait {
                root: root.clone(),
                turn: None,
                done: Some(done),
            },
        );
        let followup = FollowupRequest {
            session: root.clone(),
            content: text,
            request_id: Some(request_id),
        };
        // A retry carries the same request id: the session takes the prompt once.
        let mut sent = self.control.followup(&followup).await;
        for _ in 0..3 {
            match &sent {
                Err(e) if e.code == ErrorCode::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    sent = self.control.followup(&followup).await;
                }
                _ => break,
            }
        }
        if let Err(e) = sent {
            lock(&self.prompts).remove(&id);
            return Err(control_error(e));
        }
        let ended = tokio::time::timeout(self.turn_timeout, wait).await;
        lock(&self.prompts).remove(&id);
        match ended {
            Ok(Ok(TurnResult {
                outcome: TurnEndOutcome::Completed,
                ..
            })) => Ok(PromptResponse::new(StopReason::EndTurn)),
            Ok(Ok(TurnResult {
                outcome: TurnEndOutcome::Cancelled,
                ..
            })) => Ok(PromptResponse::new(StopReason::Cancelled)),
            Ok(Ok(TurnResult {
                outcome: TurnEndOutcome::Failed,
                error,
            })) => Err(Error::new(AcpCode::INTERNAL_ERROR, format!(
                "the turn of session {root} failed: {}",
                error.unwrap_or_else(|| "no reason given".into())
            ))),
            Ok(Err(_)) => Err(Error::new(AcpCode::INTERNAL_ERROR, "the front door stopped")),
            Err(_) => Err(Error::new(AcpCode::INTERNAL_ERROR, format!(
                "no end of the turn of session {root} within {} s; the session keeps running (see `lineage tree {root}`)",
                self.turn_timeout.as_secs()
            ))),
        }
    }

    async fn cancel(&self, session: &str) {
        let Ok(target) = SessionId::parse(session) else {
            return;
        };
        let authority = {
            let tree = lock(&self.tree);
            if tree.is_root(&target) {
                Some(InterruptAuthority::TopLevel)
            } else {
                tree.root_of(&target)
                    .map(|root| InterruptAuthority::Ancestor { session: root })
            }
        };
        let Some(authority) = authority else {
            tracing::info!(%target, "session/cancel for a session not open here; ignored");
            return;
        };
        match self
            .control
            .interrupt(&InterruptRequest {
                target: target.clone(),
                authority,
            })
            .await
        {
            Ok(reply) => tracing::info!(%target, outcome = ?reply.outcome, "session/cancel"),
            Err(e) => tracing::warn!(%target, error = %e.message, "session/cancel failed"),
        }
    }

    async fn close(&self, request: CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
        let root = self.root(&request.session_id.to_string())?;
        let report = self
            .control
            .drain(vec![root.clone()])
            .await
            .map_err(control_error)?;
        lock(&self.tree).remove_root(&root);
        tracing::info!(session = %root, drained = ?report, "ACP session closed (drained)");
        Ok(CloseSessionResponse::new())
    }
}

/// Serves ACP on stdin/stdout until the client closes the connection.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    if args.profile.trim().is_empty() {
        return Err(crate::output::usage(
            "--profile is empty; name an agent profile (`lineage agents` lists them)",
        ));
    }
    // Logs go to stderr (stdout is the ACP connection); RUST_LOG filters them.
    let _telemetry = crate::telemetry::init(None);
    let control = crate::client::control(g).await?;
    let subjects = crate::global::subjects(g)?;
    let nats = control.nats().clone();
    let front = Arc::new(Front {
        control,
        nats: nats.clone(),
        subjects: subjects.clone(),
        profile: args.profile,
        turn_timeout: Duration::from_secs(args.turn_timeout_s.max(1)),
        project: args.project,
        map_cwd: args.map_cwd,
        tree: Mutex::new(FrontTree::new(false)),
        client: OnceLock::new(),
        prompts: Mutex::new(HashMap::new()),
    });
    let mut feed = feed::Feed::open(&nats, &subjects)
        .await
        .map_err(|e| ControlError::new(ErrorCode::Unavailable, e.to_string()))?;
    let approving = approve::serve(front.clone())
        .await
        .map_err(|e| ControlError::new(ErrorCode::Unavailable, e))?;
    let fed = front.clone();
    let feeding = tokio::spawn(async move {
        while let Some(mut event) = feed.next().await {
            if let tree::Observed::Start {
                parent,
                child,
                label,
                ..
            } = &mut event
            {
                let ours = lock(&fed.tree).knows(parent);
                if ours {
                    *label = feed.label(child).await;
                }
            }
            let emits = lock(&fed.tree).observe(event);
            fed.emit(emits);
        }
    });
    let served = serve(front).await;
    feeding.abort();
    approving.abort();
    served.map_err(|e| ControlError::new(ErrorCode::Internal, format!("ACP connection: {e}")))
}

async fn serve(front: Arc<Front>) -> Result<(), Error> {
    let transport = ByteStreams::new(
        tokio::io::stdout().compat_write(),
        tokio::io::stdin().compat(),
    );
    let (f1, f2, f3, f4, f5, f6) = (
        front.clone(),
        front.clone(),
        front.clone(),
        front.clone(),
        front.clone(),
        front,
    );
    Agent
        .v1()
        .name("lineage")
        .on_receive_request(
            async move |request: InitializeRequest, responder, cx: ConnectionTo<Client>| {
                let subagents = request.client_capabilities.subagents.is_some();
                *lock(&f1.tree) = FrontTree::new(subagents);
                let _ = f1.client.set(cx);
                responder.respond(
                    InitializeResponse::new(request.protocol_version)
                        .agent_capabilities(
                            AgentCapabilities::new()
                                .load_session(true)
                                .session_capabilities(
                                    SessionCapabilities::new()
                                        .close(SessionCloseCapabilities::new()),
                                ),
                        )
                        .agent_info(Implementation::new("lineage", env!("CARGO_PKG_VERSION"))),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, cx: ConnectionTo<Client>| {
                let front = f2.clone();
                cx.spawn(
                    async move { responder.respond_with_result(front.new_session(request).await) },
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx: ConnectionTo<Client>| {
                let front = f3.clone();
                cx.spawn(
                    async move { responder.respond_with_result(load::load(&front, request).await) },
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, cx: ConnectionTo<Client>| {
                let front = f4.clone();
                cx.spawn(async move { responder.respond_with_result(front.prompt(request).await) })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: CloseSessionRequest, responder, cx: ConnectionTo<Client>| {
                let front = f5.clone();
                cx.spawn(async move { responder.respond_with_result(front.close(request).await) })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |cancel: CancelNotification, cx: ConnectionTo<Client>| {
                let front = f6.clone();
                cx.spawn(async move {
                    front.cancel(&cancel.session_id.to_string()).await;
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await
}

#[cfg(test)]
mod tests {
    use super::mapped_cwd;
    use std::path::Path;

    #[test]
    fn f1_an_editors_directory_maps_under_the_workdir_or_is_refused_in_one_line() {
        let root = Path::new("/home/me/src");
        assert_eq!(mapped_cwd(root, Path::new("/home/me/src")), Ok(None));
        assert_eq!(
            mapped_cwd(root, Path::new("/home/me/src/app/web")),
            Ok(Some("app/web".into()))
        );
        for outside in ["/home/me/other", "/home/me/srcx", "/home/me/src/../etc"] {
            let why = mapped_cwd(root, Path::new(outside)).unwrap_err();
            assert!(why.contains("--map-cwd"), "{outside}: {why}");
            assert!(!why.contains('\n'));
        }
        assert!(mapped_cwd(root, Path::new("app"))
            .unwrap_err()
            .contains("absolute"));
    }
}
