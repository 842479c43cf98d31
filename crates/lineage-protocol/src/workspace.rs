//! What a spawn asks of a new session's files (issue 39): [`SpawnWorkspace`].
//!
//! A root gets files a client uploaded (`lineage spawn --workspace DIR` packs the directory and
//! stores it as `upload.<request id>` before it asks for the spawn, then names its digest
//! here); a child inherits a copy of its parent's files as they are at the spawn, or starts
//! empty. The object names are derived ([`lineage_core::workspace`]), never sent: a spawn
//! cannot name another session's files.

use serde::{Deserialize, Serialize};

/// The files a new session starts in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SpawnWorkspace {
    /// A root's files, uploaded by the client as `upload.<request id>` with this digest.
    Uploaded {
        /// The upload's digest (`SHA-256=<base64url>`); a mismatch refuses the spawn.
        digest: String,
    },
    /// A root's files cloned by the node from a git repository (its `agents.git_protocols`
    /// decide which URLs), at a branch or tag; the clone's files without `.git`.
    Git {
        /// The repository URL.
        url: String,
        /// The branch or tag.
        reference: String,
    },
    /// A child: a copy of its parent's files as they are at the spawn (the default when the
    /// parent has a workspace).
    Inherit,
    /// A child: an empty working directory.
    Empty,
}

impl SpawnWorkspace {
    /// Parses the spawn tool's and the CLI's `workspace` word: `inherit` or `empty`.
    pub fn parse_choice(word: &str) -> Result<Self, String> {
        match word {
            "inherit" => Ok(SpawnWorkspace::Inherit),
            "empty" => Ok(SpawnWorkspace::Empty),
            other => Err(format!(
                "workspace {other:?} is not a choice; give \"inherit\" (a copy of the parent's files) or \"empty\""
            )),
        }
    }
}
