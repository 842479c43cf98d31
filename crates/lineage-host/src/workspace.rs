//! A session's files on the bus (issue 39): the host's side of [`lineage_core::workspace`].
//!
//! - **Birth**: a root's upload is read, checked against the digest its spawn named and stored
//!   again as the session's base ([`Shared::adopt_upload`]); a child that inherits gets a
//!   snapshot of its parent's directory as it is at the spawn, stored as its base by the
//!   spawning node ([`Shared::inherit_files`]). The base goes into the creation window
//!   (`workspace/snapshot`).
//! - **Launch** (birth and every resume, on any node): the last snapshot the log names is read,
//!   its digest checked against the log's, and materialized into the session's own directory
//!   before the agent starts ([`Shared::materialize`]); what the directory held is replaced.
//! - **Turn end**: the directory is packed and stored under the checkpoint name not in use
//!   ([`Shared::checkpoint`]); the engine stages the snapshot's event, written with `turn/end`
//!   (the object is stored before the log names it).
//! - **A child's changes** (the `apply_child_changes` tool): its base and latest snapshots as
//!   its log names them, compared whole file by whole file, applied to the parent's own
//!   directory all or nothing ([`Shared::apply_child_changes`]).
//!
//! Packing and unpacking are file-system work, run off the async threads.

use std::path::{Path, PathBuf};

use lineage_core::ids::{RequestId, SessionId};
use lineage_core::workspace::{base_object, checkpoint_object, upload_object, WorkspaceSnapshot};
use lineage_workspace::{Caps, Digest};

use crate::error::HostError;
use crate::shared::Shared;

/// Packs `dir` off the async threads, refused past `caps`.
async fn pack(dir: PathBuf, caps: Caps) -> Result<lineage_workspace::Snapshot, HostError> {
    tokio::task::spawn_blocking(move || lineage_workspace::pack(&dir, caps))
        .await
        .map_err(|e| HostError::Internal(format!("the workspace packer stopped: {e}")))?
        .map_err(HostError::from)
}

impl Shared {
    /// Reads `snapshot`'s object, refused unless the store recorded it with the digest the log
    /// names (a damaged or replaced object is never materialized).
    async fn read_snapshot(&self, snapshot: &WorkspaceSnapshot) -> Result<Vec<u8>, HostError> {
        let stored = self.bus.workspaces.get(&snapshot.object).await?;
        let Some(stored) = stored else {
            return Err(HostError::BadRequest(format!(
                "workspace object {} is not in the cluster's workspace bucket; upload it first (lineage spawn --workspace DIR does)",
                snapshot.object
            )));
        };
        // The store checked the bytes against the digest it recorded as it read them: what is
        // left is that the recorded digest is the one the log names (not hashed again here).
        let expected = Digest::parse(&snapshot.digest)?;
        let found = Digest::parse(&stored.digest)?;
        if found != expected {
            return Err(lineage_workspace::WorkspaceError::DigestMismatch {
                expected: expected.to_string(),
                found: found.to_string(),
            }
            .into());
        }
        Ok(stored.bytes)
    }

    /// A root's upload (`upload.<request id>`, named with `digest` by its spawn) stored again
    /// as `session`'s base; the base's snapshot.
    pub(crate) async fn adopt_upload(
        &self,
        request: &RequestId,
        session: &SessionId,
        digest: &str,
    ) -> Result<WorkspaceSnapshot, HostError> {
        let upload = WorkspaceSnapshot {
            object: upload_object(request),
            digest: digest.to_owned(),
        };
        let bytes = self.read_snapshot(&upload).await?;
        let object = base_object(session);
        let digest = self.bus.workspaces.put(&object, &bytes).await?;
        Ok(WorkspaceSnapshot { object, digest })
    }

    /// A snapshot of the parent's directory `dir` (within the parent's `caps`), stored as
    /// `child`'s base.
    pub(crate) async fn inherit_files(
        &self,
        dir: &Path,
        caps: Caps,
        child: &SessionId,
    ) -> Result<WorkspaceSnapshot, HostError> {
        let packed = pack(dir.to_path_buf(), caps).await?;
        let object = base_object(child);
        let digest = self.bus.workspaces.put(&object, &packed.bytes).await?;
        Ok(WorkspaceSnapshot { object, digest })
    }

    /// A root's files cloned from a git repository (`reference` of `url`, as this node's
    /// `agents.git_protocols` allow), packed without `.git` and stored as `session`'s base.
    pub(crate) async fn clone_files(
        &self,
        url: &str,
        reference: &str,
        session: &SessionId,
    ) -> Result<WorkspaceSnapshot, HostError> {
        let protocols = self.drivers.git_protocols();
        lineage_drivers::git::check(url, reference, &protocols)?;
        let tmp = tempfile::tempdir().map_err(|e| {
            HostError::Internal(format!("cannot make a directory to clone {url} into: {e}"))
        })?;
        let repo = tmp.path().join("repo");
        lineage_drivers::git::clone(url, reference, &protocols, &repo).await?;
        let packed = pack(repo, Caps::default()).await?;
        let object = base_object(session);
        let digest = self.bus.workspaces.put(&object, &packed.bytes).await?;
        Ok(WorkspaceSnapshot { object, digest })
    }

    /// `session`'s checkpoint number `n`: `dir` packed and stored under its name.
    pub(crate) async fn checkpoint(
        &self,
        session: &SessionId,
        dir: &Path,
        caps: Caps,
        n: u64,
    ) -> Result<WorkspaceSnapshot, HostError> {
        let packed = pack(dir.to_path_buf(), caps).await?;
        let object = checkpoint_object(session, n);
        let digest = self.bus.workspaces.put(&object, &packed.bytes).await?;
        Ok(WorkspaceSnapshot { object, digest })
    }

    /// `child`'s changes (its latest files against its base, as its log names them) applied to
    /// `dir`, a parent's own files: the paths changed (and how), and how many were already so.
    /// All or nothing: conflicts refuse it with their paths.
    pub(crate) async fn apply_child_changes(
        &self,
        child: &SessionId,
        dir: &Path,
        caps: Caps,
    ) -> Result<(Vec<(String, String)>, usize), HostError> {
        let (events, _) = self.bus.events.read(child).await?;
        let (base, latest) = match (
            lineage_core::workspace::base_snapshot(&events),
            lineage_core::workspace::latest_snapshot(&events),
        ) {
            (Some(base), Some((latest, _))) => (base, latest),
            _ => {
                return Err(HostError::BadRequest(format!(
                    "child {child} has no workspace (it was spawned with workspace empty, or its parent had none): it has no changes to apply"
                )))
            }
        };
        let (before, after) = (
            self.read_snapshot(&base).await?,
            self.read_snapshot(&latest).await?,
        );
        let digests = (Digest::parse(&base.digest)?, Digest::parse(&latest.digest)?);
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || apply_into(&before, &after, &digests, &dir, caps))
            .await
            .map_err(|e| HostError::Internal(format!("the workspace applier stopped: {e}")))?
    }

    /// Materializes `snapshot` into `dir` (the session's own directory), replacing what it held;
    /// the files get the directory's owner (a sandbox's uid).
    pub(crate) async fn materialize(
        &self,
        snapshot: &WorkspaceSnapshot,
        dir: &Path,
        caps: Caps,
    ) -> Result<(), HostError> {
        let bytes = self.read_snapshot(snapshot).await?;
        let expected = Digest::parse(&snapshot.digest)?;
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || materialize_into(&bytes, &expected, &dir, caps))
            .await
            .map_err(|e| HostError::Internal(format!("the workspace unpacker stopped: {e}")))?
    }
}

/// The changes from `before` to `after` (two snapshots) applied to `dir`, the files given its
/// owner.
fn apply_into(
    before: &[u8],
    after: &[u8],
    digests: &(Digest, Digest),
    dir: &Path,
    caps: Caps,
) -> Result<(Vec<(String, String)>, usize), HostError> {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().map_err(|e| {
        HostError::Internal(format!(
            "cannot make a directory to compare snapshots in: {e}"
        ))
    })?;
    let (a, b) = (tmp.path().join("base"), tmp.path().join("latest"));
    lineage_workspace::unpack(before, &digests.0, &a, caps)?;
    lineage_workspace::unpack(after, &digests.1, &b, caps)?;
    let changes = lineage_workspace::changes::changes(&a, &b)?;
    let applied = lineage_workspace::changes::apply(&changes, dir)?;
    let io = |e: std::io::Error| {
        HostError::Internal(format!(
            "cannot give {}'s files their owner: {e}",
            dir.display()
        ))
    };
    let owner = std::fs::metadata(dir).map_err(io)?.uid();
    if owner != std::fs::metadata("/proc/self").map_err(io)?.uid() {
        lineage_drivers::sandbox::chown_tree(dir, owner).map_err(io)?;
    }
    let changed = applied
        .changed
        .into_iter()
        .map(|(path, kind)| (path, kind.to_owned()))
        .collect();
    Ok((changed, applied.already))
}

/// Empties `dir` (the session's own), unpacks into it (refused past `caps`) and gives the
/// files its owner.
fn materialize_into(
    bytes: &[u8],
    expected: &Digest,
    dir: &Path,
    caps: Caps,
) -> Result<(), HostError> {
    use std::os::unix::fs::MetadataExt;
    let io = |e: std::io::Error| {
        HostError::Internal(format!(
            "cannot prepare the session's directory {} for its workspace: {e}",
            dir.display()
        ))
    };
    let owner = match std::fs::metadata(dir) {
        Ok(meta) => {
            for entry in std::fs::read_dir(dir).map_err(io)? {
                let path = entry.map_err(io)?.path();
                let removed = match std::fs::symlink_metadata(&path).map_err(io)?.is_dir() {
                    true => std::fs::remove_dir_all(&path),
                    false => std::fs::remove_file(&path),
                };
                removed.map_err(io)?;
            }
            Some(meta.uid())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(e)),
    };
    lineage_workspace::unpack(bytes, expected, dir, caps)?;
    // This process's uid (the owner of what it creates): a sandbox's uid differs.
    let me = std::fs::metadata("/proc/self").map_err(io)?.uid();
    if let Some(owner) = owner.filter(|o| *o != me) {
        lineage_drivers::sandbox::chown_tree(dir, owner).map_err(io)?;
    }
    Ok(())
}
