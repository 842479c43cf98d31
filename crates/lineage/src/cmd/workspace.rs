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

use std::path::{Path, PathBuf};

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::events::EventLogStore;
use lineage_bus::ports::WorkspaceStore;
use lineage_core::ids::SessionId;
use lineage_core::workspace::{base_snapshot, latest_snapshot, WorkspaceSnapshot};
use lineage_workspace::{Caps, Digest, WorkspaceError};

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
) -> Result<
    (
        WorkspaceSnapshot,
        WorkspaceSnapshot,
        lineage_bus::workspace::NatsWorkspaces,
    ),
    ControlError,
> {
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
    let (Some(base), Some((latest, _))) = (base_snapshot(&events), latest_snapshot(&events)) else {
        return Err(ControlError::new(
            ErrorCode::NotFound,
            format!("session {session} has no workspace; spawn a root with --workspace DIR, and its children inherit it"),
        ));
    };
    let store = lineage_bus::workspace::NatsWorkspaces::new(nats, &subjects, Default::default());
    Ok((base, latest, store))
}

/// Materializes `snapshot` into `into`, checked against its recorded digest.
async fn materialize(
    store: &dyn WorkspaceStore,
    snapshot: &WorkspaceSnapshot,
    into: &Path,
) -> Result<(), ControlError> {
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
    lineage_workspace::unpack(&stored.bytes, &digest, into, Caps::default())
        .map_err(workspace_error)?;
    Ok(())
}

/// The changes from `base` to `latest`, both materialized in a temporary directory.
async fn changes(
    store: &dyn WorkspaceStore,
    base: &WorkspaceSnapshot,
    latest: &WorkspaceSnapshot,
) -> Result<Vec<lineage_workspace::changes::Change>, ControlError> {
    let tmp = tempfile::tempdir().map_err(|e| {
        ControlError::new(
            ErrorCode::Internal,
            format!("cannot make a temporary directory: {e}"),
        )
    })?;
    let (a, b) = (tmp.path().join("base"), tmp.path().join("latest"));
    materialize(store, base, &a).await?;
    materialize(store, latest, &b).await?;
    lineage_workspace::changes::changes(&a, &b).map_err(workspace_error)
}

/// Runs a `workspace` subcommand.
pub(crate) async fn run(g: &Global, verb: WorkspaceVerb) -> Result<(), ControlError> {
    match verb {
        WorkspaceVerb::Diff { session } => {
            let session = parse_session("session", &session)?;
            let (base, latest, store) = snapshots(g, &session).await?;
            let found = changes(&store, &base, &latest).await?;
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
            let (_, latest, store) = snapshots(g, &session).await?;
            materialize(&store, &latest, &into).await?;
            println!("pulled {session}'s files into {}", into.display());
            Ok(())
        }
        WorkspaceVerb::Apply { session, into } => {
            let session = parse_session("session", &session)?;
            let (base, latest, store) = snapshots(g, &session).await?;
            let found = changes(&store, &base, &latest).await?;
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
