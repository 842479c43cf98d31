//! A session's changes against the files it started from (issue 39): [`changes`] between two
//! materialized trees, [`render`] as a unified diff, and [`apply`] to another directory.
//!
//! A change is whole-file: a path added, modified or deleted, with its content before and
//! after (a link's content is its target). [`apply`] is all or nothing: each path of the
//! target must still be as the base had it (or already as the change leaves it: a second
//! apply changes nothing); any other path is a conflict, reported with every conflicting path,
//! and nothing is written. Nothing is merged silently.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::WorkspaceError;
use crate::snapshot::{Caps, Layer};

/// One path's state in a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file: content and permission bits.
    File {
        /// Its bytes.
        content: Vec<u8>,
        /// Its permission bits.
        mode: u32,
    },
    /// A symbolic link and its target.
    Link(PathBuf),
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The path, relative to the root, `/`-separated.
    pub path: String,
    /// Before (`None`: added).
    pub before: Option<Entry>,
    /// After (`None`: deleted).
    pub after: Option<Entry>,
}

impl Change {
    /// `added`, `modified` or `deleted`.
    pub fn kind(&self) -> &'static str {
        match (&self.before, &self.after) {
            (None, _) => "added",
            (Some(_), None) => "deleted",
            (Some(_), Some(_)) => "modified",
        }
    }
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// Paths written or removed, with what happened to each (`added`, `modified`,
    /// `deleted`), in path order.
    pub changed: Vec<(String, &'static str)>,
    /// Paths already as the change leaves them.
    pub already: usize,
}

/// The files and links under `root` (directories only as the paths they hold).
fn tree(root: &Path) -> Result<BTreeMap<String, Entry>, WorkspaceError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).map_err(|e| WorkspaceError::io(&dir, e))? {
            let entry = entry.map_err(|e| WorkspaceError::io(&dir, e))?;
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).map_err(|e| WorkspaceError::io(&path, e))?;
            let rel = path
                .strip_prefix(root)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).map_err(|e| WorkspaceError::io(&path, e))?;
                out.insert(rel, Entry::Link(target));
            } else if meta.is_file() {
                let content = fs::read(&path).map_err(|e| WorkspaceError::io(&path, e))?;
                let mode = meta.permissions().mode() & 0o777;
                out.insert(rel, Entry::File { content, mode });
            }
        }
    }
    Ok(out)
}

/// The changes that turn the tree at `base` into the tree at `after`, by path.
pub fn changes(base: &Path, after: &Path) -> Result<Vec<Change>, WorkspaceError> {
    let (mut before, after) = (tree(base)?, tree(after)?);
    let mut out = Vec::new();
    for (path, now) in after {
        match before.remove(&path) {
            Some(was) if was == now => {}
            was => out.push(Change {
                path,
                before: was,
                after: Some(now),
            }),
        }
    }
    for (path, was) in before {
        out.push(Change {
            path,
            before: Some(was),
            after: None,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// A stored tree: a whole snapshot and, maybe, a delta laid over it ([`crate::delta`]).
pub type Stored<'a> = (Layer<'a>, Option<Layer<'a>>);

/// The changes that turn the stored tree `before` into `after` (each materialized in a
/// temporary directory, removed after), held to `caps`.
pub fn between(
    before: Stored<'_>,
    after: Stored<'_>,
    caps: Caps,
) -> Result<Vec<Change>, WorkspaceError> {
    let tmp = tempfile::tempdir().map_err(|e| WorkspaceError::io(std::env::temp_dir(), e))?;
    let (a, b) = (tmp.path().join("before"), tmp.path().join("after"));
    crate::unpack_layers(before.0, before.1, &a, caps)?;
    crate::unpack_layers(after.0, after.1, &b, caps)?;
    changes(&a, &b)
}

fn text(entry: Option<&Entry>) -> Option<String> {
    match entry {
        None => Some(String::new()),
        Some(Entry::File { content, .. }) => String::from_utf8(content.clone()).ok(),
        Some(Entry::Link(target)) => Some(format!("-> {}\n", target.display())),
    }
}

/// `changes` as a unified diff (`a/` and `b/` paths, as `git diff` writes them; a binary
/// file as one line saying it differs): a patch `git apply` (or `patch -p1`) applies to the
/// base's text files.
pub fn render(changes: &[Change]) -> String {
    let mut out = String::new();
    for change in changes {
        let (old, new) = (
            change
                .before
                .as_ref()
                .map_or("/dev/null".to_owned(), |_| format!("a/{}", change.path)),
            change
                .after
                .as_ref()
                .map_or("/dev/null".to_owned(), |_| format!("b/{}", change.path)),
        );
        out.push_str(&format!(
            "diff a/{0} b/{0} ({1})\n",
            change.path,
            change.kind()
        ));
        match (text(change.before.as_ref()), text(change.after.as_ref())) {
            (Some(a), Some(b)) => {
                let diff = similar::TextDiff::from_lines(&a, &b);
                out.push_str(
                    &diff
                        .unified_diff()
                        .context_radius(3)
                        .header(&old, &new)
                        .to_string(),
                );
            }
            _ => out.push_str(&format!("Binary files {old} and {new} differ\n")),
        }
    }
    out
}

/// Applies `changes` to `into` (see the module docs): all of them, or none and the conflicts.
pub fn apply(changes: &[Change], into: &Path) -> Result<Applied, WorkspaceError> {
    let mut conflicts = Vec::new();
    let mut todo = Vec::new();
    let mut applied = Applied::default();
    for change in changes {
        let rel = Path::new(&change.path);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(WorkspaceError::BadEntry {
                entry: change.path.clone(),
                reason: "leaves the root",
            });
        }
        let path = into.join(rel);
        let now = read_entry(&path)?;
        if now == change.after {
            applied.already += 1;
        } else if now == change.before {
            todo.push((path, change));
        } else {
            conflicts.push(change.path.clone());
        }
    }
    if !conflicts.is_empty() {
        return Err(WorkspaceError::Conflicts {
            into: into.to_path_buf(),
            paths: conflicts,
        });
    }
    for (path, change) in todo {
        write_entry(&path, change.after.as_ref())?;
        applied.changed.push((change.path.clone(), change.kind()));
    }
    Ok(applied)
}

fn read_entry(path: &Path) -> Result<Option<Entry>, WorkspaceError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WorkspaceError::io(path, e)),
    };
    if meta.file_type().is_symlink() {
        let target = fs::read_link(path).map_err(|e| WorkspaceError::io(path, e))?;
        return Ok(Some(Entry::Link(target)));
    }
    if !meta.is_file() {
        // A directory (or a device) where the change has a file: a conflict, never replaced.
        return Ok(Some(Entry::Link(PathBuf::from("<not a file>"))));
    }
    let content = fs::read(path).map_err(|e| WorkspaceError::io(path, e))?;
    Ok(Some(Entry::File {
        content,
        mode: meta.permissions().mode() & 0o777,
    }))
}

fn write_entry(path: &Path, entry: Option<&Entry>) -> Result<(), WorkspaceError> {
    let io = |e| WorkspaceError::io(path, e);
    match entry {
        None => fs::remove_file(path).map_err(io),
        Some(entry) => {
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(|e| WorkspaceError::io(parent, e))?;
            }
            if fs::symlink_metadata(path).is_ok() {
                fs::remove_file(path).map_err(io)?;
            }
            match entry {
                Entry::Link(target) => std::os::unix::fs::symlink(target, path).map_err(io),
                Entry::File { content, mode } => {
                    fs::write(path, content).map_err(io)?;
                    fs::set_permissions(path, fs::Permissions::from_mode(*mode)).map_err(io)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn trees() -> (tempfile::TempDir, tempfile::TempDir) {
        let (base, after) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for root in [base.path(), after.path()] {
            write(root, "src/lib.rs", "fn a() {}\nfn b() {}\n");
            write(root, "README", "same\n");
            write(root, "old.txt", "to delete\n");
        }
        write(
            after.path(),
            "src/lib.rs",
            "fn a() {}\nfn b() { fixed() }\n",
        );
        write(after.path(), "src/new.rs", "new\n");
        fs::remove_file(after.path().join("old.txt")).unwrap();
        (base, after)
    }

    #[test]
    fn changes_are_the_added_modified_and_deleted_paths_and_render_as_a_unified_diff() {
        let (base, after) = trees();
        let found = changes(base.path(), after.path()).unwrap();
        let kinds: Vec<_> = found.iter().map(|c| (c.path.as_str(), c.kind())).collect();
        assert_eq!(
            kinds,
            [
                ("old.txt", "deleted"),
                ("src/lib.rs", "modified"),
                ("src/new.rs", "added")
            ]
        );
        let diff = render(&found);
        assert!(
            diff.contains("--- a/src/lib.rs\n+++ b/src/lib.rs\n"),
            "{diff}"
        );
        assert!(diff.contains("-fn b() {}\n+fn b() { fixed() }\n"), "{diff}");
        assert!(diff.contains("+++ /dev/null"), "{diff}");
    }

    #[test]
    fn the_rendered_diff_is_a_patch_git_applies_to_the_base() {
        let (base, after) = trees();
        let diff = render(&changes(base.path(), after.path()).unwrap());
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(base.path())
                .output()
                .expect("git runs")
        };
        let elsewhere = tempfile::tempdir().unwrap();
        let patch = elsewhere.path().join("changes.patch");
        fs::write(&patch, &diff).unwrap();
        let applied = git(&["apply", "-p1", patch.to_str().unwrap()]);
        assert!(
            applied.status.success(),
            "{}\n{diff}",
            String::from_utf8_lossy(&applied.stderr)
        );
        assert_eq!(changes(after.path(), base.path()).unwrap(), vec![]);
    }

    #[test]
    fn apply_writes_every_change_once_and_a_second_apply_changes_nothing() {
        let (base, after) = trees();
        let found = changes(base.path(), after.path()).unwrap();
        let target = tempfile::tempdir().unwrap();
        for rel in ["src/lib.rs", "README", "old.txt"] {
            let text = fs::read_to_string(base.path().join(rel)).unwrap();
            write(target.path(), rel, &text);
        }
        let first = apply(&found, target.path()).unwrap();
        assert_eq!(
            first.changed,
            [
                ("old.txt".to_owned(), "deleted"),
                ("src/lib.rs".to_owned(), "modified"),
                ("src/new.rs".to_owned(), "added")
            ]
        );
        assert_eq!(first.already, 0);
        assert_eq!(changes(after.path(), target.path()).unwrap(), vec![]);
        let again = apply(&found, target.path()).unwrap();
        assert_eq!(
            again,
            Applied {
                changed: vec![],
                already: 3
            }
        );
    }

    #[test]
    fn a_path_changed_on_both_sides_is_a_conflict_and_nothing_is_written() {
        let (base, after) = trees();
        let found = changes(base.path(), after.path()).unwrap();
        let target = tempfile::tempdir().unwrap();
        write(
            target.path(),
            "src/lib.rs",
            "fn a() {}\nfn b() { mine() }\n",
        );
        write(target.path(), "README", "same\n");
        write(target.path(), "old.txt", "to delete\n");
        let err = apply(&found, target.path()).unwrap_err();
        let line = err.to_string();
        assert!(line.contains("src/lib.rs"), "{line}");
        assert!(!line.contains('\n'), "one line: {line}");
        assert!(target.path().join("old.txt").exists(), "nothing written");
        assert!(
            !target.path().join("src/new.rs").exists(),
            "nothing written"
        );
    }
}
