//! One snapshot of a workspace: a gzip'd tar of a directory ([`pack`]) and its materialization
//! into a new or empty directory ([`unpack`]).
//!
//! [`pack`] walks the directory in name order, honours its `.gitignore` files (whether or not it
//! is a git repository) and leaves `.git` out; it keeps directories, regular files (content and
//! permission bits) and symbolic links, and skips sockets, fifos and devices. It stops at the
//! first cap it passes ([`Caps`]), with the numbers.
//!
//! [`unpack`] takes the bytes as untrusted (a client uploaded them): it checks the digest the
//! snapshot was recorded with before it reads anything, then extracts into a staging directory
//! inside the target, refusing any entry whose path leaves the root (absolute, `..`), that lies
//! under a link, that appears twice, a link whose target leaves the root, and anything but a
//! directory, a file or a link; it counts bytes and entries against the caps as it goes (a
//! small archive that inflates past them is refused). Only when every entry passed are they
//! moved into the target; a refusal removes the staging directory, so nothing is materialized.
//! Permission bits are kept, set-id and sticky bits dropped.

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::digest::Digest;
use crate::error::WorkspaceError;

/// Caps on one snapshot: what a profile allows a session's workspace to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Bytes of file content, unpacked.
    pub max_bytes: u64,
    /// Entries: directories, files and links.
    pub max_files: u64,
}

impl Default for Caps {
    /// 256 MiB in 100,000 entries.
    fn default() -> Self {
        Caps {
            max_bytes: 256 * 1024 * 1024,
            max_files: 100_000,
        }
    }
}

/// A packed workspace.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The gzip'd tar.
    pub bytes: Vec<u8>,
    /// Its digest, recorded with it and checked before it is materialized.
    pub digest: Digest,
    /// Entries it holds.
    pub files: u64,
    /// Bytes of file content it holds, unpacked.
    pub content_bytes: u64,
}

/// What [`unpack`] materialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unpacked {
    /// Entries written.
    pub files: u64,
    /// Bytes of file content written.
    pub content_bytes: u64,
}

/// Packs `dir` (see the module docs), refused past `caps`.
pub fn pack(dir: &Path, caps: Caps) -> Result<Snapshot, WorkspaceError> {
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    tar.follow_symlinks(false);
    let (files, content_bytes) = walk(dir, caps, |rel, path, meta| {
        append(&mut tar, rel, path, meta, None)
    })?;
    finish(tar, dir, files, content_bytes)
}

/// Visits every entry of `dir` a snapshot holds (module docs), in name order, with its path
/// relative to `dir`, its path and its metadata; the entries and content bytes seen, refused
/// past `caps`.
pub(crate) fn walk(
    dir: &Path,
    caps: Caps,
    mut visit: impl FnMut(&Path, &Path, &fs::Metadata) -> Result<(), WorkspaceError>,
) -> Result<(u64, u64), WorkspaceError> {
    let meta = fs::metadata(dir).map_err(|e| WorkspaceError::NotADirectory {
        path: dir.to_owned(),
        reason: e.to_string(),
    })?;
    if !meta.is_dir() {
        return Err(WorkspaceError::NotADirectory {
            path: dir.to_owned(),
            reason: "it is not a directory".to_owned(),
        });
    }
    let walk = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .ignore(false)
        .parents(false)
        .git_global(false)
        .git_ignore(true)
        .git_exclude(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    let (mut files, mut content_bytes) = (0u64, 0u64);
    for entry in walk {
        let entry = entry.map_err(|e| WorkspaceError::io(dir, std::io::Error::other(e)))?;
        if entry.depth() == 0 {
            continue;
        }
        let path = entry.path();
        let rel = path.strip_prefix(dir).unwrap_or(path);
        let meta = fs::symlink_metadata(path).map_err(|e| WorkspaceError::io(path, e))?;
        let kind = meta.file_type();
        if !(kind.is_dir() || kind.is_file() || kind.is_symlink()) {
            continue;
        }
        files += 1;
        if files > caps.max_files {
            return Err(over("files", files, caps.max_files, "files"));
        }
        if kind.is_file() {
            content_bytes += meta.len();
            if content_bytes > caps.max_bytes {
                return Err(over("bytes", content_bytes, caps.max_bytes, "bytes"));
            }
        }
        visit(rel, path, &meta)?;
    }
    Ok((files, content_bytes))
}

/// The gzip'd tar being written.
pub(crate) type Writer = tar::Builder<GzEncoder<Vec<u8>>>;

/// Appends the entry at `path` (metadata `meta`) as `name`: a directory, a link, or a file
/// whose content is `content` when given (already read), else read from `path`.
pub(crate) fn append(
    tar: &mut Writer,
    name: &Path,
    path: &Path,
    meta: &fs::Metadata,
    content: Option<&[u8]>,
) -> Result<(), WorkspaceError> {
    let kind = meta.file_type();
    let mut header = tar::Header::new_gnu();
    header.set_mode(meta.permissions().mode() & 0o777);
    header.set_mtime(
        meta.modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs()),
    );
    let written = if kind.is_dir() {
        header.set_entry_type(tar::EntryType::Directory);
        header.set_size(0);
        tar.append_data(&mut header, name, std::io::empty())
    } else if kind.is_symlink() {
        let target = fs::read_link(path).map_err(|e| WorkspaceError::io(path, e))?;
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        tar.append_link(&mut header, name, target)
    } else if let Some(content) = content {
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(content.len() as u64);
        tar.append_data(&mut header, name, content)
    } else {
        let file = fs::File::open(path).map_err(|e| WorkspaceError::io(path, e))?;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(meta.len());
        tar.append_data(&mut header, name, file.take(meta.len()))
    };
    written.map_err(|e| WorkspaceError::io(path, e))
}

/// The snapshot `tar` holds, `files` entries and `content_bytes` bytes of `dir`.
pub(crate) fn finish(
    tar: Writer,
    dir: &Path,
    files: u64,
    content_bytes: u64,
) -> Result<Snapshot, WorkspaceError> {
    let bytes = tar
        .into_inner()
        .and_then(|gz| gz.finish())
        .map_err(|e| WorkspaceError::io(dir, e))?;
    Ok(Snapshot {
        digest: Digest::of(&bytes),
        bytes,
        files,
        content_bytes,
    })
}

/// One stored layer of a workspace: a snapshot's bytes and the digest it was recorded with.
#[derive(Debug, Clone, Copy)]
pub struct Layer<'a> {
    /// The gzip'd tar as read from the store (untrusted).
    pub bytes: &'a [u8],
    /// The digest it was recorded with.
    pub digest: &'a Digest,
}

/// A layer as read from the store, its bytes owned.
#[derive(Debug, Clone)]
pub struct OwnedLayer {
    /// The gzip'd tar (untrusted).
    pub bytes: Vec<u8>,
    /// The digest it was recorded with.
    pub digest: Digest,
}

impl OwnedLayer {
    /// The layer, borrowed.
    pub fn layer(&self) -> Layer<'_> {
        Layer {
            bytes: &self.bytes,
            digest: &self.digest,
        }
    }
}

/// A stored tree as read: a whole snapshot and, maybe, a delta laid over it.
#[derive(Debug, Clone)]
pub struct Tree {
    /// The whole snapshot.
    pub whole: OwnedLayer,
    /// The delta over it.
    pub delta: Option<OwnedLayer>,
}

impl Tree {
    /// Both layers, borrowed (what [`unpack_layers`] and [`crate::changes::between`] take).
    pub fn layers(&self) -> (Layer<'_>, Option<Layer<'_>>) {
        (
            self.whole.layer(),
            self.delta.as_ref().map(OwnedLayer::layer),
        )
    }
}

/// How an archive's paths read: a whole tree, or a delta's `put/` and `removed/` halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Whole,
    Delta,
}

/// Materializes the snapshot `bytes`, recorded with digest `expected`, into `into` (created if
/// absent; it must be empty), refused past `caps` (see the module docs).
pub fn unpack(
    bytes: &[u8],
    expected: &Digest,
    into: &Path,
    caps: Caps,
) -> Result<Unpacked, WorkspaceError> {
    let base = Layer {
        bytes,
        digest: expected,
    };
    unpack_layers(base, None, into, caps)
}

/// Materializes the whole snapshot `base` and, when given, a `delta` against it
/// ([`crate::delta`]) laid over it, into `into` (created if absent; it must be empty). Both
/// digests are checked before anything is read; each layer is held to `caps` on its own.
pub fn unpack_layers(
    base: Layer<'_>,
    delta: Option<Layer<'_>>,
    into: &Path,
    caps: Caps,
) -> Result<Unpacked, WorkspaceError> {
    for layer in std::iter::once(&base).chain(delta.as_ref()) {
        let found = Digest::of(layer.bytes);
        if found != *layer.digest {
            return Err(WorkspaceError::DigestMismatch {
                expected: layer.digest.to_string(),
                found: found.to_string(),
            });
        }
    }
    let created = match fs::read_dir(into) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(WorkspaceError::TargetNotEmpty {
                    path: into.to_owned(),
                });
            }
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(into).map_err(|e| WorkspaceError::io(into, e))?;
            true
        }
        Err(e) => return Err(WorkspaceError::io(into, e)),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let staging = into.join(format!(".lineage-incoming-{}-{nanos}", std::process::id()));
    let extracted = fs::create_dir(&staging)
        .map_err(|e| WorkspaceError::io(&staging, e))
        .and_then(|()| extract(base.bytes, &staging, caps, Form::Whole))
        .and_then(|whole| match delta {
            None => Ok(whole),
            Some(delta) => extract(delta.bytes, &staging, caps, Form::Delta),
        })
        .and_then(|unpacked| move_up(&staging, into).map(|()| unpacked));
    if extracted.is_err() {
        let _ = fs::remove_dir_all(&staging);
        if created {
            let _ = fs::remove_dir(into);
        }
    }
    extracted
}

/// Extracts every entry into `root`, checking each (module docs). A delta's `removed/` entries
/// remove their path; its `put/` entries replace theirs.
fn extract(bytes: &[u8], root: &Path, caps: Caps, form: Form) -> Result<Unpacked, WorkspaceError> {
    let mut archive = tar::Archive::new(GzDecoder::new(bytes));
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut safe_dirs: HashSet<PathBuf> = HashSet::new();
    let (mut files, mut content_bytes) = (0u64, 0u64);
    let entries = archive.entries().map_err(|e| WorkspaceError::io(root, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| WorkspaceError::io(root, e))?;
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions()
            || kind.is_pax_local_extensions()
            || kind.is_gnu_longname()
            || kind.is_gnu_longlink()
        {
            continue;
        }
        let shown = String::from_utf8_lossy(&entry.path_bytes())
            .chars()
            .take(120)
            .collect::<String>();
        let bad = |reason| WorkspaceError::BadEntry {
            entry: shown.clone(),
            reason,
        };
        files += 1;
        if files > caps.max_files {
            return Err(over("files", files, caps.max_files, "files"));
        }
        let path = entry.path().map_err(|e| WorkspaceError::io(root, e))?;
        let rel = inside(&path).ok_or_else(|| bad("leaves the workspace (absolute, or ..)"))?;
        let (rel, removed) = match form {
            Form::Whole => (rel, false),
            Form::Delta => {
                let (half, rel) = crate::delta::split(&rel)
                    .ok_or_else(|| bad("is neither under put/ nor under removed/ in a delta"))?;
                // A delta replaces and removes what is there: no remembered directory is
                // safe from one entry to the next.
                safe_dirs.clear();
                (rel, half == crate::delta::REMOVED)
            }
        };
        if !seen.insert(rel.clone()) {
            return Err(bad("appears twice"));
        }
        let dest = root.join(&rel);
        if removed {
            if !kind.is_file() || entry.header().size().unwrap_or(1) != 0 {
                return Err(bad("is a removal that is not an empty file"));
            }
            // Under a path the delta made a file or a link, it is gone already; nothing is
            // removed through a link.
            if no_link_above(root, &rel, &mut safe_dirs).is_ok() {
                clear(&dest, false)?;
            }
            continue;
        }
        no_link_above(root, &rel, &mut safe_dirs).map_err(|()| bad("lies under a link"))?;
        if form == Form::Delta {
            clear(&dest, kind.is_dir())?;
        }
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        if kind.is_dir() {
            fs::create_dir_all(&dest).map_err(|e| WorkspaceError::io(&dest, e))?;
            set_mode(&dest, mode | 0o700)?;
        } else if kind.is_file() {
            let size = entry
                .header()
                .size()
                .map_err(|e| WorkspaceError::io(&dest, e))?;
            content_bytes += size;
            if content_bytes > caps.max_bytes {
                return Err(over("bytes", content_bytes, caps.max_bytes, "bytes"));
            }
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent).map_err(|e| WorkspaceError::io(parent, e))?;
            }
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&dest)
                .map_err(|e| WorkspaceError::io(&dest, e))?;
            let copied = std::io::copy(&mut (&mut entry).take(size), &mut file)
                .and_then(|n| file.flush().map(|()| n))
                .map_err(|e| WorkspaceError::io(&dest, e))?;
            if copied != size {
                return Err(bad("is shorter than its header says"));
            }
            set_mode(&dest, mode)?;
        } else if kind.is_symlink() {
            let target = entry
                .link_name()
                .map_err(|e| WorkspaceError::io(&dest, e))?
                .ok_or_else(|| bad("is a link with no target"))?;
            if !link_stays_inside(&rel, &target) {
                return Err(bad("is a link whose target leaves the workspace"));
            }
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent).map_err(|e| WorkspaceError::io(parent, e))?;
            }
            std::os::unix::fs::symlink(&target, &dest).map_err(|e| WorkspaceError::io(&dest, e))?;
        } else {
            return Err(bad(
                "is a hard link, device or fifo, which a workspace does not hold",
            ));
        }
    }
    Ok(Unpacked {
        files,
        content_bytes,
    })
}

/// Removes what is at `dest` (a delta replaces or removes it), but a directory when
/// `keep_dir` (a directory put over a directory keeps what it holds).
fn clear(dest: &Path, keep_dir: bool) -> Result<(), WorkspaceError> {
    let removed = match fs::symlink_metadata(dest) {
        // Absent, or under what is now a file.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(())
        }
        Err(e) => return Err(WorkspaceError::io(dest, e)),
        Ok(meta) if meta.is_dir() && keep_dir => return Ok(()),
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(dest),
        Ok(_) => fs::remove_file(dest),
    };
    removed.map_err(|e| WorkspaceError::io(dest, e))
}

/// Moves what `staging` holds into `into` (its parent), then removes `staging`.
fn move_up(staging: &Path, into: &Path) -> Result<(), WorkspaceError> {
    let entries = fs::read_dir(staging).map_err(|e| WorkspaceError::io(staging, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| WorkspaceError::io(staging, e))?;
        let to = into.join(entry.file_name());
        fs::rename(entry.path(), &to).map_err(|e| WorkspaceError::io(&to, e))?;
    }
    fs::remove_dir(staging).map_err(|e| WorkspaceError::io(staging, e))
}

/// `path` as a relative path of normal components; `None` for an absolute path, one with
/// `..`, or an empty one.
fn inside(path: &Path) -> Option<PathBuf> {
    let mut rel = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!rel.as_os_str().is_empty()).then_some(rel)
}

/// `Err` when a directory above `rel` inside `root` is a link (writing through it could leave
/// the root); directories found safe are remembered.
fn no_link_above(root: &Path, rel: &Path, safe: &mut HashSet<PathBuf>) -> Result<(), ()> {
    let mut above = PathBuf::new();
    let parts: Vec<_> = rel.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        above.push(part);
        if safe.contains(&above) {
            continue;
        }
        match fs::symlink_metadata(root.join(&above)) {
            Ok(meta) if meta.file_type().is_symlink() => return Err(()),
            Ok(_) => {
                safe.insert(above.clone());
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// Whether a link at `rel` pointing to `target` stays inside the root, read without following
/// anything: a relative target whose `..` never climbs above the root.
fn link_stays_inside(rel: &Path, target: &Path) -> bool {
    let mut depth = rel.components().count().saturating_sub(1);
    for component in target.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

fn set_mode(path: &Path, mode: u32) -> Result<(), WorkspaceError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| WorkspaceError::io(path, e))
}

fn over(what: &'static str, found: u64, cap: u64, unit: &'static str) -> WorkspaceError {
    WorkspaceError::OverCap {
        what,
        found,
        cap,
        unit,
    }
}

#[cfg(test)]
pub(crate) mod tests;
