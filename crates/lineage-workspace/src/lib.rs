//! `lineage-workspace`: a session's files as one snapshot (issue 39), with no IO but the local
//! file system: the node stores the snapshot (JetStream's Object Store) and materializes it in
//! the session's sandbox.
//!
//! | module | what |
//! |---|---|
//! | [`snapshot`] | [`pack`] a directory into a gzip'd tar (honouring `.gitignore`, without `.git`), [`unpack`] one into a new directory: digest checked first, every entry checked (no path out of the root, no link out of it, no device), caps on bytes and files |
//! | [`changes`] | a session's [`changes::changes`] against its base (whole files), [`changes::render`] as a unified diff, [`changes::apply`] to a directory: all or nothing, conflicts reported |
//! | [`digest`] | [`Digest`]: `SHA-256=<base64url>`, the form NATS' Object Store gives an object |
//! | [`error`] | [`WorkspaceError`], the crate's one error enum: one line each, with the numbers |
//!
//! Why a gzip'd tar first: it is one object per snapshot (one put, one get, one digest), it
//! keeps modes and links, and `tar` and `flate2` are pure Rust; git bundles and patches (for
//! git workspaces) and content-addressed chunks (for incremental checkpoints) are later formats
//! beside it, chosen by figures (`lineage bench workspace`).

#![deny(missing_docs)]

pub mod changes;
pub mod digest;
pub mod error;
pub mod snapshot;

pub use digest::Digest;
pub use error::WorkspaceError;
pub use snapshot::{pack, unpack, Caps, Snapshot, Unpacked};
