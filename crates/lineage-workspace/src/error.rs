//! [`WorkspaceError`], the crate's one error enum.

use std::path::PathBuf;

/// Why a workspace could not be packed or materialized: one line that says what was wrong and
/// what to do. Nothing is left behind by a refusal ([`crate::unpack`] writes into a staging
/// directory it removes).
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The directory to pack is not a directory (or cannot be read).
    #[error("workspace {path}: {reason}; give an existing directory")]
    NotADirectory {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A snapshot would be (or is) larger than its cap.
    #[error("workspace {what} is over its cap: {found} {unit} found, at most {cap} allowed; leave build outputs out with .gitignore, or raise the profile's workspace cap")]
    OverCap {
        /// What went over (`files`, `bytes`, `snapshot`).
        what: &'static str,
        /// What was found (at least).
        found: u64,
        /// The cap.
        cap: u64,
        /// `bytes` or `files`.
        unit: &'static str,
    },
    /// The stored object is not the snapshot it names (a damaged object).
    #[error("workspace snapshot is damaged: its digest is {found}, {expected} was recorded; nothing was written (take a new snapshot)")]
    DigestMismatch {
        /// The digest recorded for it.
        expected: String,
        /// The digest of the bytes read.
        found: String,
    },
    /// An entry of the snapshot is refused (a path out of the root, a link out of it, a device).
    #[error("workspace snapshot refused: entry {entry:?} {reason}; nothing was written")]
    BadEntry {
        /// The entry's path as stored.
        entry: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The target of a materialization exists and is not empty.
    #[error("cannot materialize a workspace into {path}: it exists and is not empty")]
    TargetNotEmpty {
        /// The target directory.
        path: PathBuf,
    },
    /// Changes could not be applied: these paths differ from both the base and the change.
    #[error("cannot apply the changes to {}: {} changed there too ({}); nothing was written; reconcile those files (lineage workspace diff shows the changes) and apply again", into.display(), paths.len(), paths.join(", "))]
    Conflicts {
        /// The target directory.
        into: PathBuf,
        /// The conflicting paths.
        paths: Vec<String>,
    },
    /// A digest is not `SHA-256=<base64url>`.
    #[error("bad workspace digest {0:?}: expected SHA-256=<base64url of 32 bytes>")]
    BadDigest(String),
    /// A file-system or archive error, with the path it concerns.
    #[error("workspace {path}: {source}")]
    Io {
        /// The path it concerns.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl WorkspaceError {
    /// An IO error about `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        WorkspaceError::Io {
            path: path.into(),
            source,
        }
    }
}
