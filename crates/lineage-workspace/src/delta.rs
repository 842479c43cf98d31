//! Incremental checkpoints: a session's files as a **delta** against its base snapshot.
//!
//! A delta is a gzip'd tar like a whole snapshot, with its paths in two halves: `put/<path>`
//! for each entry added or changed since the base (a directory, a file with its content and
//! permission bits, or a link), and `removed/<path>` (an empty file) for each path the base
//! held and the directory no longer does. `tar tzf` lists it. Laid over its base with
//! [`crate::unpack_layers`], it gives the directory as it was packed.
//!
//! [`pack_delta`] walks the directory as [`crate::pack`] does (same `.gitignore` rules and
//! caps, counted over the whole directory) and compares each entry with the base's
//! [`Manifest`]: a file is hashed only when its length and bits match the base's. A turn that
//! touches one file of a 100 MB workspace stores that file, not 100 MB; the delta is also
//! exactly the session's changes against its base (what its settlement points to).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest as _, Sha256};

use crate::error::WorkspaceError;
use crate::snapshot::{self, Caps, Layer, Snapshot};

/// The half of a delta holding what was added or changed.
pub const PUT: &str = "put";
/// The half of a delta naming what was removed.
pub const REMOVED: &str = "removed";

/// One path as the base held it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    Dir { mode: u32 },
    File { len: u64, mode: u32, sha: [u8; 32] },
    Link(PathBuf),
}

/// What a whole snapshot holds, path by path (content as SHA-256): what [`pack_delta`]
/// compares a directory with. Read once per base ([`Manifest::read`]) and kept by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    held: BTreeMap<PathBuf, Held>,
}

impl Manifest {
    /// The manifest of the whole snapshot `base`, read in memory (nothing is written), its
    /// digest checked first and held to `caps`.
    pub fn read(base: Layer<'_>, caps: Caps) -> Result<Self, WorkspaceError> {
        let found = crate::Digest::of(base.bytes);
        if found != *base.digest {
            return Err(WorkspaceError::DigestMismatch {
                expected: base.digest.to_string(),
                found: found.to_string(),
            });
        }
        let here = Path::new("<base snapshot>");
        let io = |e| WorkspaceError::io(here, e);
        let mut archive = tar::Archive::new(GzDecoder::new(base.bytes));
        let mut held = BTreeMap::new();
        let (mut files, mut content_bytes) = (0u64, 0u64);
        for entry in archive.entries().map_err(io)? {
            let mut entry = entry.map_err(io)?;
            let kind = entry.header().entry_type();
            let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
            let path = entry.path().map_err(io)?.into_owned();
            files += 1;
            if files > caps.max_files {
                return Err(over("files", files, caps.max_files));
            }
            let was = if kind.is_dir() {
                Held::Dir { mode: mode | 0o700 }
            } else if kind.is_symlink() {
                Held::Link(entry.link_name().map_err(io)?.unwrap_or_default().into())
            } else if kind.is_file() {
                let len = entry.header().size().map_err(io)?;
                content_bytes += len;
                if content_bytes > caps.max_bytes {
                    return Err(over("bytes", content_bytes, caps.max_bytes));
                }
                let mut hasher = Sha256::new();
                std::io::copy(&mut (&mut entry).take(len), &mut hasher).map_err(io)?;
                Held::File {
                    len,
                    mode,
                    sha: hasher.finalize().into(),
                }
            } else {
                continue;
            };
            held.insert(path, was);
        }
        Ok(Manifest { held })
    }

    /// Paths the base holds.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether the base holds nothing.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// A packed delta: the snapshot and how many paths it changes (put and removed).
#[derive(Debug, Clone)]
pub struct Delta {
    /// The delta's gzip'd tar (`put/`, `removed/`).
    pub snapshot: Snapshot,
    /// Paths added, changed or removed against the base.
    pub changed: u64,
}

/// Packs what changed in `dir` against the base `base` (module docs). `caps` hold for the
/// whole directory, as for a whole snapshot.
pub fn pack_delta(dir: &Path, base: &Manifest, caps: Caps) -> Result<Delta, WorkspaceError> {
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    tar.follow_symlinks(false);
    let mut seen = BTreeSet::new();
    let mut changed = 0u64;
    let (files, content_bytes) = snapshot::walk(dir, caps, |rel, path, meta| {
        seen.insert(rel.to_path_buf());
        let mode = meta.permissions().mode() & 0o777;
        let was = base.held.get(rel);
        let kind = meta.file_type();
        let mut content = None;
        let same = if kind.is_dir() {
            was == Some(&Held::Dir { mode: mode | 0o700 })
        } else if kind.is_symlink() {
            let target = fs::read_link(path).map_err(|e| WorkspaceError::io(path, e))?;
            was == Some(&Held::Link(target))
        } else {
            match was {
                Some(Held::File { len, mode: m, sha }) if *len == meta.len() && *m == mode => {
                    let bytes = fs::read(path).map_err(|e| WorkspaceError::io(path, e))?;
                    let same = <[u8; 32]>::from(Sha256::digest(&bytes)) == *sha;
                    content = Some(bytes);
                    same
                }
                _ => false,
            }
        };
        if same {
            return Ok(());
        }
        changed += 1;
        let name = Path::new(PUT).join(rel);
        snapshot::append(&mut tar, &name, path, meta, content.as_deref())
    })?;
    for gone in base.held.keys().filter(|p| !seen.contains(*p)) {
        changed += 1;
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(0);
        tar.append_data(&mut header, Path::new(REMOVED).join(gone), std::io::empty())
            .map_err(|e| WorkspaceError::io(dir.join(gone), e))?;
    }
    let snapshot = snapshot::finish(tar, dir, files, content_bytes)?;
    Ok(Delta { snapshot, changed })
}

/// A delta entry's half ([`PUT`] or [`REMOVED`]) and the path under it; `None` for any other
/// path.
pub(crate) fn split(path: &Path) -> Option<(&'static str, PathBuf)> {
    let mut parts = path.components();
    let half = match parts.next()?.as_os_str().to_str()? {
        PUT => PUT,
        REMOVED => REMOVED,
        _ => return None,
    };
    let rest = parts.as_path().to_path_buf();
    (!rest.as_os_str().is_empty()).then_some((half, rest))
}

fn over(what: &'static str, found: u64, cap: u64) -> WorkspaceError {
    WorkspaceError::OverCap {
        what,
        found,
        cap,
        unit: what,
    }
}

#[cfg(test)]
mod tests;
