//! `lineage workspace diff|pull|apply SESSION` (issue 39): a session's files, read from the
//! cluster's workspace bucket as its log names them.
//!
//! - `diff` prints its changes against the files it started from (its base: a root's upload,
//!   a child's copy of its parent's files) as a unified diff;
//! - `pull --into DIR` materializes its latest files into a new or empty directory;
//! - `apply --into DIR` applies its changes to DIR (a parent's checkout, say): all of them, or
//!   none and the conflicting paths (exit 4), never merged silently; applying twice changes
//!   nothing the second time.
//!
//! The snapshots are checked against the digests the log recorded before anything is read.

use std::path::PathBuf;

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::events::EventLogStore;
use lineage_bus::ports::WorkspaceStore;
use lineage_core::ids::SessionId;
use lineage_core::workspace::{WorkspaceChanges, WorkspaceSnapshot};
use lineage_workspace::{Caps, Digest, OwnedLayer, Tree, WorkspaceError};

use crate::client::{connect, parse_session, print_json};
use crate::global::{subjects, Global};

/// The `workspace` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum WorkspaceVerb {
    /// Print a session's changes against the files it started from (a unified diff).
    #[command(
        after_help = "Example:\n  lineage workspace diff 01936c1e-7a3b-7cde-8f00-000000000001"
    )]
    Diff {
        /// The session.
        session: String,
    },
    /// Write a session's latest files into a new or empty directory.
    #[command(after_help = "Example:\n  lineage workspace pull SESSION --into /tmp/child-files")]
    Pull {
        /// The session.
        session: String,
        /// The directory (created if absent; must be empty).
        #[arg(long)]
        into: PathBuf,
    },
    /// Apply a session's changes to a directory: all, or none and the conflicts.
    #[command(after_help = "Example:\n  lineage workspace apply CHILD --into .")]
    Apply {
        /// The session whose changes to apply.
        session: String,
        /// The directory to change.
        #[arg(long)]
        into: PathBuf,
    },
}

fn workspace_error(e: WorkspaceError) -> ControlError {
    let code = match &e {
        WorkspaceError::Conflicts { .. }
        | WorkspaceError::DigestMismatch { .. }
        | WorkspaceError::OverCap { .. } => ErrorCode::Refused,
        WorkspaceError::TargetNotEmpty { .. }
        | WorkspaceError::NotADirectory { .. }
        | WorkspaceError::BadDigest(_)
        | WorkspaceError::BadEntry { .. } => ErrorCode::BadRequest,
        WorkspaceError::Io { .. } => ErrorCode::Internal,
    };
    ControlError::new(code, e.to_string())
}

/// The session's base and latest snapshots, as its log names them.
async fn snapshots(
    g: &Global,
    session: &SessionId,
) -> Result<(WorkspaceChanges, lineage_bus::workspace::NatsWorkspaces), ControlError> {
    let nats = connect(g).await?;
    let subjects = subjects(g)?;
    let logs = EventLogStore::reader(nats.clone(), subjects.clone());
    let (events, _) = logs.read(session).await.map_err(ControlError::from)?;
    if events.is_empty() {
        return Err(ControlError::new(
            ErrorCode::NotFound,
            format!("session {session} has no log in this cluster; check the id (lineage ls) and --cluster"),
        ));
    }
    let Some(files) = lineage_core::workspace::changes(&events) else {
        return Err(ControlError::new(
            ErrorCode::NotFound,
            format!("session {session} has no workspace; spawn a root with --workspace DIR, and its children inherit it"),
        ));
    };
    let store = lineage_bus::workspace::NatsWorkspaces::new(nats, &subjects, Default::default());
    Ok((files, store))
}

/// `snapshot`'s bytes and the digest the log recorded (checked as they are unpacked).
async fn read(
    store: &dyn WorkspaceStore,
    snapshot: &WorkspaceSnapshot,
) -> Result<OwnedLayer, ControlError> {
    let stored = store
        .get(&snapshot.object)
        .await
        .map_err(ControlError::from)?
        .ok_or_else(|| {
            ControlError::new(
                ErrorCode::NotFound,
                format!(
                    "workspace object {} is gone from the cluster's bucket (purged with its session?)",
                    snapshot.object
                ),
            )
        })?;
    let digest = Digest::parse(&snapshot.digest).map_err(workspace_error)?;
    Ok(OwnedLayer {
        bytes: stored.bytes,
        digest,
    })
}

/// A whole snapshot and the delta over it, read.
async fn read_layers(
    store: &dyn WorkspaceStore,
    (whole, delta): (&WorkspaceSnapshot, Option<&WorkspaceSnapshot>),
) -> Result<Tree, ControlError> {
    let whole = read(store, whole).await?;
    let delta = match delta {
        Some(delta) => Some(read(store, delta).await?),
        None => None,
    };
    Ok(Tree { whole, delta })
}

/// The changes from the session's base to its latest files.
async fn changes(
    store: &dyn WorkspaceStore,
    files: &WorkspaceChanges,
) -> Result<Vec<lineage_workspace::changes::Change>, ControlError> {
    let before = read_layers(store, (&files.base, None)).await?;
    let after = read_layers(store, files.latest_layers()).await?;
    lineage_workspace::changes::between(before.layers(), after.layers(), Caps::default())
        .map_err(workspace_error)
}

/// Runs a `workspace` subcommand.
pub(crate) async fn run(g: &Global, verb: WorkspaceVerb) -> Result<(), ControlError> {
    match verb {
        WorkspaceVerb::Diff { session } => {
            let session = parse_session("session", &session)?;
            let (files, store) = snapshots(g, &session).await?;
            let found = changes(&store, &files).await?;
            if g.json {
                let list: Vec<_> = found
                    .iter()
                    .map(|c| serde_json::json!({"path": c.path, "change": c.kind()}))
                    .collect();
                print_json(
                    &serde_json::json!({"session": session, "changes": list, "diff": lineage_workspace::changes::render(&found)}),
                );
            } else {
                print!("{}", lineage_workspace::changes::render(&found));
            }
            Ok(())
        }
        WorkspaceVerb::Pull { session, into } => {
            let session = parse_session("session", &session)?;
            let (files, store) = snapshots(g, &session).await?;
            let read = read_layers(&store, files.latest_layers()).await?;
            let (whole, delta) = read.layers();
            lineage_workspace::unpack_layers(whole, delta, &into, Caps::default())
                .map_err(workspace_error)?;
            println!("pulled {session}'s files into {}", into.display());
            Ok(())
        }
        WorkspaceVerb::Apply { session, into } => {
            let session = parse_session("session", &session)?;
            let (files, store) = snapshots(g, &session).await?;
            let found = changes(&store, &files).await?;
            let applied =
                lineage_workspace::changes::apply(&found, &into).map_err(workspace_error)?;
            if g.json {
                let changed: Vec<_> = applied
                    .changed
                    .iter()
                    .map(|(path, kind)| serde_json::json!({"path": path, "change": kind}))
                    .collect();
                print_json(
                    &serde_json::json!({"session": session, "changed": changed, "already": applied.already}),
                );
            } else {
                println!(
                    "applied {session}'s changes to {}: {} path(s) changed, {} already so",
                    into.display(),
                    applied.changed.len(),
                    applied.already
                );
            }
            Ok(())
        }
    }
}
