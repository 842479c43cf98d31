//! [`Live`]: the live agents of one node and the births and resumes under way, with the local
//! ancestry (M4) of the live ones. One part of the host's state ([`crate::shared::Shared`]);
//! every lookup of a live agent and every command sent to one goes through it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use lineage_core::authority::LocalAncestry;
use lineage_core::descriptor::SubagentShape;
use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, SessionId};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::agent::cmd::AgentCmd;
use crate::error::HostError;

/// A live agent as the host sees it (the task owns everything else).
#[derive(Clone)]
pub(crate) struct AgentHandle {
    pub(crate) tx: mpsc::UnboundedSender<AgentCmd>,
    pub(crate) turn: Arc<Mutex<Option<CancellationToken>>>,
    pub(crate) header: SessionHeader,
    pub(crate) owner: Option<SessionId>,
    pub(crate) shape: Option<SubagentShape>,
    pub(crate) policy_view: lineage_core::policy::ParentPolicyView,
    pub(crate) preset: Option<lineage_core::header::AgentPreset>,
    /// Its tool filter (C1), which its children's can only narrow.
    pub(crate) tool_filter: Option<Vec<String>>,
    /// Stops the agent's task without settling (see [`crate::fence`]).
    pub(crate) stop: CancellationToken,
    /// Its own directory of files and their caps, when it has a workspace (issue 39).
    pub(crate) workspace: Option<(std::path::PathBuf, lineage_workspace::Caps)>,
    /// A top-level session's idle TTL ([`crate::idle`]).
    pub(crate) idle_ttl: Option<lineage_core::idle::IdleTtl>,
    /// Since when nothing happened to it, ms: its last turn's end, the last message accepted
    /// into its log, or its launch (the agent task keeps it).
    pub(crate) idle_since_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Tokens in its context, as it last reported (`lineage_agent_context_tokens`).
    pub(crate) context_tokens: Arc<std::sync::atomic::AtomicU64>,
}

/// The live agents of a node, and what is on its way to be live.
pub(crate) struct Live {
    /// This node (named in `not live` errors).
    node: NodeId,
    /// The live agents, by session.
    pub(crate) agents: Mutex<HashMap<SessionId, AgentHandle>>,
    /// Births under way here: registered (or about to be) and not live yet. A resume of one
    /// answers `Starting` instead of finding its log still empty ([`crate::start`]).
    pub(crate) births: Mutex<HashSet<SessionId>>,
    /// Resumes under way here (K1): a second resume of the same session (re-adoption at
    /// start-up racing a followup's resume) waits for the first instead of launching it twice.
    pub(crate) resuming: Mutex<HashSet<SessionId>>,
    /// Sessions whose outbox an adoption here sent again ([`crate::outbox`]): once each.
    pub(crate) resent: Mutex<HashSet<SessionId>>,
    /// Who descends from whom among the live agents (M4's ancestor authority).
    pub(crate) ancestry: Mutex<LocalAncestry>,
}

impl Live {
    /// Nothing live yet on `node`.
    pub(crate) fn new(node: NodeId) -> Self {
        Live {
            node,
            agents: Mutex::new(HashMap::new()),
            births: Mutex::new(HashSet::new()),
            resuming: Mutex::new(HashSet::new()),
            resent: Mutex::new(HashSet::new()),
            ancestry: Mutex::new(LocalAncestry::new()),
        }
    }

    /// The handle of a live agent.
    pub(crate) fn handle(&self, session: &SessionId) -> Option<AgentHandle> {
        self.agents
            .lock()
            .ok()
            .and_then(|agents| agents.get(session).cloned())
    }

    /// Whether `session` is live here.
    pub(crate) fn is_live(&self, session: &SessionId) -> bool {
        self.handle(session).is_some()
    }

    /// Whether `session`'s birth is under way on this node (see [`Live::births`]).
    pub(crate) fn is_being_born(&self, session: &SessionId) -> bool {
        self.births
            .lock()
            .map(|births| births.contains(session))
            .unwrap_or(false)
    }

    /// Registers a live agent (and its local ancestry). Fails if it is already live here.
    pub(crate) fn insert(&self, session: SessionId, handle: AgentHandle) -> Result<(), HostError> {
        let mut agents = self
            .agents
            .lock()
            .map_err(|_| HostError::Internal("agent table mutex poisoned".to_owned()))?;
        if agents.contains_key(&session) {
            return Err(HostError::Internal(format!(
                "session {session} is already live on node {}",
                self.node
            )));
        }
        if let Ok(mut ancestry) = self.ancestry.lock() {
            ancestry.materialize(session.clone(), handle.header.parent_session().cloned())?;
        }
        agents.insert(session, handle);
        Ok(())
    }

    /// Drops a live agent from the table (its task ends on its own).
    pub(crate) fn remove(&self, session: &SessionId) {
        if let Ok(mut agents) = self.agents.lock() {
            agents.remove(session);
        }
        if let Ok(mut ancestry) = self.ancestry.lock() {
            ancestry.forget(session);
        }
    }

    /// Sends a command to a live agent; `NotLive` when it is not hosted here.
    pub(crate) fn send(&self, session: &SessionId, cmd: AgentCmd) -> Result<(), HostError> {
        let handle = self.handle(session).ok_or_else(|| self.not_live(session))?;
        handle.tx.send(cmd).map_err(|_| self.not_live(session))
    }

    /// Sends a command carrying a reply channel and waits for the reply.
    pub(crate) async fn ask<T>(
        &self,
        session: &SessionId,
        make: impl FnOnce(oneshot::Sender<T>) -> AgentCmd,
    ) -> Result<T, HostError> {
        let (tx, rx) = oneshot::channel();
        self.send(session, make(tx))?;
        rx.await.map_err(|_| self.not_live(session))
    }

    /// The error for a session that is not live here.
    pub(crate) fn not_live(&self, session: &SessionId) -> HostError {
        HostError::NotLive {
            session: session.to_string(),
            node: self.node.to_string(),
        }
    }
}
