//! `lineage-workspace`: a session's files as one snapshot (issue 39), with no IO but the local
//! file system: the node stores the snapshot (JetStream's Object Store) and materializes it in
//! the session's sandbox.
//!
//! | module | what |
//! |---|---|
//! | [`snapshot`] | [`pack`] a directory into a gzip'd tar (honouring `.gitignore`, without `.git`), [`unpack`] one into a new directory: digest checked first, every entry checked (no path out of the root, no link out of it, no device), caps on bytes and files |
//! | [`delta`] | incremental checkpoints: [`delta::pack_delta`] packs only what changed against a base's [`delta::Manifest`] (`put/`, `removed/`); [`unpack_layers`] lays it over its base |
//! | [`changes`] | a session's [`changes::changes`] against its base (whole files), [`changes::render`] as a unified diff, [`changes::apply`] to a directory: all or nothing, conflicts reported |
//! | [`digest`] | [`Digest`]: `SHA-256=<base64url>`, the form NATS' Object Store gives an object |
//! | [`error`] | [`WorkspaceError`], the crate's one error enum: one line each, with the numbers |
//!
//! Why a gzip'd tar: it is one object per snapshot (one put, one get, one digest), it keeps
//! modes and links, `tar` and `flate2` are pure Rust, and `tar tzf` reads it. A checkpoint is
//! a delta against the base (a tar of what changed), so a turn that touches one file stores
//! one file, and a restore is two gets (base, latest delta) whatever the number of turns. The
//! figures against a whole snapshot per turn are in `benches/README.md` (`lineage bench
//! workspace`).

#![deny(missing_docs)]

pub mod changes;
pub mod delta;
pub mod digest;
pub mod error;
pub mod snapshot;

pub use delta::{pack_delta, Delta, Manifest};
pub use digest::Digest;
pub use error::WorkspaceError;
pub use snapshot::{
    pack, unpack, unpack_layers, Caps, Layer, OwnedLayer, Snapshot, Tree, Unpacked,
};
