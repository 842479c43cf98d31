//! Sandboxes as uids of their own (V2): `agents.sandbox_uids` ([`UidRange`]), the pool a node
//! that may switch uids leases them from ([`UidPool`], [`UidLease`]), and the file-system steps
//! around it ([`effective_uid`], [`chown_tree`], [`unsearchable_above`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// `agents.sandbox_uids`: the uids a node that may switch uids (root) gives its sandboxes, one
/// per live session, so that outside their namespaces too no two agents share a user (V2).
/// Written `"FIRST-LAST"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UidRange {
    /// The first uid.
    pub first: u32,
    /// The last uid (included).
    pub last: u32,
}

impl TryFrom<String> for UidRange {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        let bad = || {
            format!(
                "{text:?} is not a uid range: write \"FIRST-LAST\" above 0, e.g. \"200000-200999\""
            )
        };
        let (first, last) = text.split_once('-').ok_or_else(bad)?;
        let first: u32 = first.trim().parse().map_err(|_| bad())?;
        let last: u32 = last.trim().parse().map_err(|_| bad())?;
        if first == 0 || last < first || last == u32::MAX {
            return Err(bad());
        }
        Ok(UidRange { first, last })
    }
}

impl From<UidRange> for String {
    fn from(range: UidRange) -> String {
        format!("{}-{}", range.first, range.last)
    }
}

/// The uids of [`UidRange`] and which are in use. Cheap to clone.
#[derive(Debug, Clone)]
pub struct UidPool {
    range: UidRange,
    used: Arc<Mutex<BTreeSet<u32>>>,
}

/// One uid of a [`UidPool`], given back when dropped.
#[derive(Debug)]
pub struct UidLease {
    /// The uid.
    pub uid: u32,
    used: Arc<Mutex<BTreeSet<u32>>>,
}

impl UidPool {
    /// A pool of `range`, all free.
    pub fn new(range: UidRange) -> Self {
        UidPool {
            range,
            used: Arc::default(),
        }
    }

    /// A free uid, preferring `hint`'s slot (the same session gets the same uid again when
    /// it is free); `None` when every uid is in use.
    pub fn take(&self, hint: u64) -> Option<UidLease> {
        let mut used = self.used.lock().ok()?;
        let count = u64::from(self.range.last - self.range.first) + 1;
        let start = hint % count;
        // Bounded: at most `count` probes.
        let uid = (0..count)
            .map(|i| self.range.first + ((start + i) % count) as u32)
            .find(|uid| !used.contains(uid))?;
        used.insert(uid);
        Some(UidLease {
            uid,
            used: self.used.clone(),
        })
    }
}

impl Drop for UidLease {
    fn drop(&mut self) {
        if let Ok(mut used) = self.used.lock() {
            used.remove(&self.uid);
        }
    }
}

/// The node's effective uid (0: it may switch uids).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Makes `path` and everything below it user `uid`'s (and group `uid`'s), not following
/// symbolic links: a session's working directory handed to the uid its sandbox runs as.
pub fn chown_tree(path: &Path, uid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid))?;
    if std::fs::symlink_metadata(path)?.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid)?;
        }
    }
    Ok(())
}

/// The first directory above `path` (itself included) that other users cannot search, when
/// there is one: a sandbox running as another uid could not reach `path` through it.
pub fn unsearchable_above(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.ancestors()
        .filter(|dir| !dir.as_os_str().is_empty())
        .find(|dir| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 == 0))
        .map(Path::to_path_buf)
}
