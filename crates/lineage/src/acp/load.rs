//! `session/load` of a root (F3): the tree from the registry, every transcript from its log,
//! wherever the sessions run.
//!
//! The root's transcript is replayed as what each part is ([`super::replay`]: the user's
//! messages as user chunks, the replies as agent chunks, a child's reports and settlement
//! notices as that child's messages and end, never as the user speaking); each descendant is announced from its registry record, parents before children (in
//! depth order), and, for a client with the `subagents` capability, its own transcript is
//! replayed under its own session id. Then the tree is live like a new one.

use agent_client_protocol::v1::schema::{LoadSessionRequest, LoadSessionResponse};
use agent_client_protocol::{Error, ErrorCode as AcpCode};
use lineage_bus::events::EventLogStore;
use lineage_core::ids::SessionId;
use lineage_core::lifecycle::SessionState;
use lineage_registry::{Consistency, RegistryClient};

use super::feed::label_of;
use super::replay::Replayed;
use super::show::{notification, user_text};
use super::tree::{ChildState, Emit};
use super::{lock, refuse, Front};

/// Replays `session`'s transcript to the client.
async fn replay(front: &Front, logs: &EventLogStore, session: &SessionId) -> Result<(), Error> {
    let (events, _) = logs.read(session).await.map_err(|e| {
        Error::new(
            AcpCode::INTERNAL_ERROR,
            format!("cannot read the log of session {session}: {e}"),
        )
    })?;
    let Some(client) = front.client.get() else {
        return Ok(());
    };
    let id = session.to_string();
    let shows = lock(&front.tree).shows_subagents();
    for part in super::replay::transcript(session, &events) {
        let n = match part {
            Replayed::User(text) => user_text(&id, text),
            Replayed::Shown(emit @ Emit::Text { .. }) => match notification(emit) {
                Some(n) => n,
                None => continue,
            },
            Replayed::Shown(emit) => match shows.then(|| notification(emit)).flatten() {
                Some(n) => n,
                None => continue,
            },
        };
        if let Err(e) = client.send_notification(n) {
            return Err(Error::new(
                AcpCode::INTERNAL_ERROR,
                format!("cannot replay to the client: {e}"),
            ));
        }
    }
    Ok(())
}

/// Loads a root session and its tree.
pub(crate) async fn load(
    front: &Front,
    request: LoadSessionRequest,
) -> Result<LoadSessionResponse, Error> {
    let raw = request.session_id.to_string();
    let root = SessionId::parse(&raw).map_err(|e| refuse(format!("session {raw}: {e}")))?;
    let registry = RegistryClient::new(front.nats.clone(), front.subjects.cluster().to_owned());
    let mut records = registry
        .subtree(root.clone(), Consistency::Linearizable)
        .await
        .map_err(|e| {
            Error::new(
                AcpCode::INTERNAL_ERROR,
                format!("cannot read the registry: {e}"),
            )
        })?;
    let Some(record) = records.iter().find(|r| r.id() == &root) else {
        return Err(refuse(format!(
            "session {root} is not in the registry; check the id with `lineage tree`"
        )));
    };
    if let Some(parent) = record.header.parent_session() {
        return Err(refuse(format!(
            "session {root} is a child of {parent}; load the root of its tree"
        )));
    }
    if record.state == SessionState::Disposed {
        return Err(refuse(format!(
            "session {root} was closed (disposed); open a new session"
        )));
    }
    lock(&front.tree).add_root(root.clone());
    let logs = EventLogStore::reader(front.nats.clone(), front.subjects.clone());
    records.sort_by_key(|r| r.depth());
    let shows = lock(&front.tree).shows_subagents();
    for r in records.iter().filter(|r| r.id() != &root) {
        let Some(parent) = r.header.parent_session() else {
            continue;
        };
        let state = match r.state {
            SessionState::Running | SessionState::Starting => ChildState::Running,
            SessionState::Waiting | SessionState::Settled | SessionState::Disposed => {
                ChildState::Idle
            }
        };
        let title = label_of(r).unwrap_or_else(|| {
            format!(
                "subagent {}",
                r.id().as_str().chars().take(8).collect::<String>()
            )
        });
        let emits = {
            let mut tree = lock(&front.tree);
            let emits = tree.add_known(parent.clone(), r.id().clone(), title, state);
            if let Some(placement) = &r.placement {
                tree.place(r.id().clone(), placement.node.clone());
            }
            emits
        };
        front.emit(emits);
    }
    // Every session is announced before any transcript names it (a report, an end).
    replay(front, &logs, &root).await?;
    if shows {
        for r in records.iter().filter(|r| r.id() != &root) {
            replay(front, &logs, r.id()).await?;
        }
    }
    tracing::info!(session = %root, sessions = records.len(), "ACP session loaded");
    Ok(LoadSessionResponse::new())
}
