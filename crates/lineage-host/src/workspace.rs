//! A session's files on the bus (issue 39): the host's side of [`lineage_core::workspace`].
//!
//! - **Birth**: a root's upload is read, checked against the digest its spawn named and stored
//!   again as the session's base ([`Shared::adopt_upload`]); a child that inherits gets a
//!   snapshot of its parent's directory as it is at the spawn, stored as its base by the
//!   spawning node ([`Shared::inherit_files`]). The base goes into the creation window
//!   (`workspace/snapshot`).
//! - **Launch** (birth and every resume, on any node): the last snapshot the log names is read
//!   (with the base under it when it is a delta), each digest checked against the log's, and
//!   materialized into the session's own directory before the agent starts
//!   ([`Shared::materialize`]); what the directory held is replaced.
//! - **Turn end**: what changed in the directory against the base (the base's manifest read
//!   once per launch) is packed as a delta and stored under the checkpoint name not in use
//!   ([`Shared::checkpoint`]); the engine stages the snapshot's event, written with `turn/end`
//!   (the object is stored before the log names it). A turn that changed nothing since the
//!   last checkpoint stores and logs nothing.
//! - **A child's changes** (the `apply_child_changes` tool): its base and latest files as its
//!   log names them, compared whole file by whole file, applied to the parent's own directory
//!   all or nothing ([`Shared::apply_child_changes`]).
//!
//! Packing and unpacking are file-system work, run off the async threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lineage_core::ids::{RequestId, SessionId};
use lineage_core::workspace::{
    base_object, checkpoint_object, upload_object, WorkspaceChanges, WorkspaceSnapshot,
};
use lineage_workspace::{Caps, Digest, Layer, Manifest, OwnedLayer, Tree};

use crate::error::HostError;
use crate::shared::Shared;

/// Packs `dir` off the async threads, refused past `caps`.
async fn pack(dir: PathBuf, caps: Caps) -> Result<lineage_workspace::Snapshot, HostError> {
    blocking("workspace packer", move || {
        lineage_workspace::pack(&dir, caps).map_err(HostError::from)
    })
    .await
}

impl Shared {
    /// Reads `snapshot`'s object, refused unless the store recorded it with the digest the log
    /// names (a damaged or replaced object is never materialized).
    async fn read_snapshot(&self, snapshot: &WorkspaceSnapshot) -> Result<Vec<u8>, HostError> {
        if let Some(bytes) = self.just_packed.take(snapshot) {
            return Ok(bytes);
        }
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
        let upload = WorkspaceSnapshot::whole(upload_object(request), digest.to_owned());
        let bytes = self.read_snapshot(&upload).await?;
        let object = base_object(session);
        let digest = self.bus.workspaces.put(&object, &bytes).await?;
        Ok(WorkspaceSnapshot::whole(object, digest))
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
        let snapshot = WorkspaceSnapshot::whole(object, digest);
        self.just_packed.keep(&snapshot, packed.bytes);
        Ok(snapshot)
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
        Ok(WorkspaceSnapshot::whole(object, digest))
    }

    /// `session`'s checkpoint number `n`: what changed in `dir` against `base` (whose
    /// manifest is read once into `manifest`), stored under its name. `None` when nothing
    /// changed since `latest` (nothing is stored or logged).
    pub(crate) async fn checkpoint(
        &self,
        session: &SessionId,
        dir: &Path,
        caps: Caps,
        n: u64,
        files: &WorkspaceChanges,
        manifest: &mut Option<Arc<Manifest>>,
    ) -> Result<Option<WorkspaceSnapshot>, HostError> {
        let base = match manifest {
            Some(base) => base.clone(),
            None => {
                let bytes = self.read_snapshot(&files.base).await?;
                let digest = Digest::parse(&files.base.digest)?;
                let read = blocking("manifest reader", move || {
                    Manifest::read(
                        Layer {
                            bytes: &bytes,
                            digest: &digest,
                        },
                        caps,
                    )
                    .map_err(HostError::from)
                })
                .await?;
                manifest.insert(Arc::new(read)).clone()
            }
        };
        let dir = dir.to_path_buf();
        let delta = blocking("workspace packer", move || {
            lineage_workspace::pack_delta(&dir, &base, caps).map_err(HostError::from)
        })
        .await?;
        let unchanged = delta.snapshot.digest.to_string() == files.latest.digest
            || (delta.changed == 0 && files.latest == files.base);
        if unchanged {
            return Ok(None);
        }
        let object = checkpoint_object(session, n);
        let digest = self
            .bus
            .workspaces
            .put(&object, &delta.snapshot.bytes)
            .await?;
        Ok(Some(WorkspaceSnapshot {
            object,
            digest,
            changed: Some(delta.changed),
        }))
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
        let Some(files) = lineage_core::workspace::changes(&events) else {
            return Err(HostError::BadRequest(format!(
                "child {child} has no workspace (it was spawned with workspace empty, or its parent had none): it has no changes to apply"
            )));
        };
        let before = self.read_layers((&files.base, None)).await?;
        let after = self.read_layers(files.latest_layers()).await?;
        let dir = dir.to_path_buf();
        blocking("workspace applier", move || {
            let found = lineage_workspace::changes::between(before.layers(), after.layers(), caps)?;
            apply_into(&found, &dir)
        })
        .await
    }

    /// Materializes a session's latest files (`files`) into `dir` (its own directory),
    /// replacing what it held; the files get the directory's owner (a sandbox's uid).
    pub(crate) async fn materialize(
        &self,
        files: &WorkspaceChanges,
        dir: &Path,
        caps: Caps,
    ) -> Result<(), HostError> {
        let layers = self.read_layers(files.latest_layers()).await?;
        let dir = dir.to_path_buf();
        blocking("workspace unpacker", move || {
            materialize_into(&layers, &dir, caps)
        })
        .await
    }

    /// The objects of a whole snapshot and the delta over it, each checked against the log.
    async fn read_layers(
        &self,
        (whole, delta): (&WorkspaceSnapshot, Option<&WorkspaceSnapshot>),
    ) -> Result<Tree, HostError> {
        let whole = self.read_layer(whole).await?;
        let delta = match delta {
            None => None,
            Some(delta) => Some(self.read_layer(delta).await?),
        };
        Ok(Tree { whole, delta })
    }

    async fn read_layer(&self, snapshot: &WorkspaceSnapshot) -> Result<OwnedLayer, HostError> {
        Ok(OwnedLayer {
            bytes: self.read_snapshot(snapshot).await?,
            digest: Digest::parse(&snapshot.digest)?,
        })
    }
}

/// The bases this node packed for children lately, by object and digest: a child that starts
/// on its parent's node is materialized from the bytes at hand instead of reading back what
/// the node has just stored (the base is stored all the same: a resume elsewhere and the
/// child's changes read it). Each is taken once; at most [`JustPacked::MAX_BYTES`] are kept,
/// the oldest dropped first.
#[derive(Debug, Default)]
pub(crate) struct JustPacked {
    kept: std::sync::Mutex<std::collections::VecDeque<(WorkspaceSnapshot, Vec<u8>)>>,
}

impl JustPacked {
    /// What the kept snapshots may hold in all.
    const MAX_BYTES: usize = 64 << 20;

    fn keep(&self, snapshot: &WorkspaceSnapshot, bytes: Vec<u8>) {
        if bytes.len() > Self::MAX_BYTES {
            return;
        }
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        kept.push_back((snapshot.clone(), bytes));
        while kept.iter().map(|(_, b)| b.len()).sum::<usize>() > Self::MAX_BYTES {
            kept.pop_front();
        }
    }

    /// The bytes of `snapshot` if this node packed it (same object, same digest).
    fn take(&self, snapshot: &WorkspaceSnapshot) -> Option<Vec<u8>> {
        let mut kept = self.kept.lock().ok()?;
        let at = kept.iter().position(|(s, _)| s == snapshot)?;
        kept.remove(at).map(|(_, bytes)| bytes)
    }
}

/// Runs file-system work off the async threads.
async fn blocking<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> Result<T, HostError> + Send + 'static,
) -> Result<T, HostError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| HostError::Internal(format!("the {what} stopped: {e}")))?
}

/// `changes` applied to `dir`, the files given its owner.
fn apply_into(
    changes: &[lineage_workspace::changes::Change],
    dir: &Path,
) -> Result<(Vec<(String, String)>, usize), HostError> {
    use std::os::unix::fs::MetadataExt;
    let applied = lineage_workspace::changes::apply(changes, dir)?;
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
fn materialize_into(layers: &Tree, dir: &Path, caps: Caps) -> Result<(), HostError> {
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
    let (whole, delta) = layers.layers();
    lineage_workspace::unpack_layers(whole, delta, dir, caps)?;
    // This process's uid (the owner of what it creates): a sandbox's uid differs.
    let me = std::fs::metadata("/proc/self").map_err(io)?.uid();
    if let Some(owner) = owner.filter(|o| *o != me) {
        lineage_drivers::sandbox::chown_tree(dir, owner).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_just_packed_base_is_taken_once_and_only_by_its_own_digest() {
        let kept = JustPacked::default();
        let base = WorkspaceSnapshot::whole("c.base".into(), "SHA-256=a".into());
        kept.keep(&base, vec![1, 2, 3]);
        let other = WorkspaceSnapshot::whole("c.base".into(), "SHA-256=b".into());
        assert_eq!(
            kept.take(&other),
            None,
            "another digest is another snapshot"
        );
        assert_eq!(kept.take(&base), Some(vec![1, 2, 3]));
        assert_eq!(kept.take(&base), None, "taken once");
        // Past the cap, the oldest go first.
        let big = |name: &str| WorkspaceSnapshot::whole(name.into(), "SHA-256=x".into());
        for name in ["1", "2", "3"] {
            kept.keep(&big(name), vec![0; JustPacked::MAX_BYTES / 2]);
        }
        assert_eq!(kept.take(&big("1")), None);
        assert!(kept.take(&big("2")).is_some() && kept.take(&big("3")).is_some());
    }
}
