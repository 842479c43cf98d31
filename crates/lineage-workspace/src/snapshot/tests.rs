//! Tests of pack and unpack: round trips, what is left out, caps, damaged and crafted snapshots
//! (issue 39: "a workspace over the cap is refused with the numbers; a damaged object (digest
//! mismatch) is refused, never materialized").

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;

pub(crate) fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

pub(crate) fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let rel = entry
                .path()
                .strip_prefix(root)
                .unwrap()
                .display()
                .to_string();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
                out.push(format!("{rel}/"));
            } else if kind.is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    fs::read_link(entry.path()).unwrap().display()
                ));
            } else {
                out.push(format!(
                    "{rel} = {}",
                    fs::read_to_string(entry.path()).unwrap()
                ));
            }
        }
    }
    out.sort();
    out
}

/// A crafted tar entry: its path, its type, and its data (or a link's target).
pub(crate) type Crafted<'a> = (&'a str, tar::EntryType, &'a str);

/// A snapshot of crafted tar entries `(path, kind, data or link target)`, gzip'd, with headers
/// written as given (no path checks, as a hostile client could).
pub(crate) fn crafted(entries: &[Crafted]) -> Snapshot {
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for (path, kind, data) in entries {
        let mut header = tar::Header::new_old();
        let name = &mut header.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_entry_type(*kind);
        header.set_mode(0o644);
        if *kind == tar::EntryType::Symlink || *kind == tar::EntryType::Link {
            let link = &mut header.as_old_mut().linkname;
            link[..data.len()].copy_from_slice(data.as_bytes());
            header.set_size(0);
            header.set_cksum();
            tar.append(&header, std::io::empty()).unwrap();
        } else {
            header.set_size(data.len() as u64);
            header.set_cksum();
            tar.append(&header, data.as_bytes()).unwrap();
        }
    }
    let bytes = tar.into_inner().unwrap().finish().unwrap();
    Snapshot {
        digest: Digest::of(&bytes),
        bytes,
        files: entries.len() as u64,
        content_bytes: 0,
    }
}

#[test]
fn a_workspace_round_trips_without_what_git_ignores_or_git_itself() {
    let src = tempfile::tempdir().unwrap();
    let root = src.path();
    write(root, "src/lib.rs", "fn main() {}");
    write(root, "README.md", "hello");
    write(root, ".gitignore", "target/\n*.log\n");
    write(root, "target/debug/big", "build output");
    write(root, "run.log", "noise");
    write(root, ".git/HEAD", "ref: refs/heads/main");
    write(root, "scripts/run.sh", "#!/bin/sh");
    fs::set_permissions(
        root.join("scripts/run.sh"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", root.join("lib-link")).unwrap();
    let snap = pack(root, Caps::default()).unwrap();
    assert_eq!(snap.digest, Digest::of(&snap.bytes));

    let dst = tempfile::tempdir().unwrap();
    let into = dst.path().join("work");
    let unpacked = unpack(&snap.bytes, &snap.digest, &into, Caps::default()).unwrap();
    assert_eq!(
        listing(&into),
        [
            ".gitignore = target/\n*.log\n",
            "README.md = hello",
            "empty/",
            "lib-link -> src/lib.rs",
            "scripts/",
            "scripts/run.sh = #!/bin/sh",
            "src/",
            "src/lib.rs = fn main() {}",
        ]
    );
    assert_eq!(unpacked.files, snap.files);
    assert_eq!(unpacked.content_bytes, snap.content_bytes);
    let mode = fs::metadata(into.join("scripts/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755, "the executable bit travels");
    // The same tree packs to the same bytes (name order, no clock but the files' own).
    assert_eq!(pack(root, Caps::default()).unwrap().digest, snap.digest);
}

#[test]
fn a_workspace_over_its_cap_is_refused_with_the_numbers() {
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "a", &"x".repeat(600));
    write(src.path(), "b", &"y".repeat(600));
    let caps = Caps {
        max_bytes: 1000,
        max_files: 10,
    };
    let e = pack(src.path(), caps).unwrap_err().to_string();
    assert!(e.contains("1200 bytes found, at most 1000 allowed"), "{e}");
    assert!(!e.contains('\n'));
    let e = pack(
        src.path(),
        Caps {
            max_bytes: 10_000,
            max_files: 1,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("2 files found, at most 1 allowed"), "{e}");
    let e = pack(&src.path().join("a"), caps).unwrap_err().to_string();
    assert!(e.contains("not a directory"), "{e}");
}

#[test]
fn a_damaged_snapshot_is_refused_and_nothing_is_written() {
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "file", "content");
    let snap = pack(src.path(), Caps::default()).unwrap();
    let mut damaged = snap.bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    let dst = tempfile::tempdir().unwrap();
    let into = dst.path().join("work");
    let e = unpack(&damaged, &snap.digest, &into, Caps::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("damaged") && e.contains("nothing was written"),
        "{e}"
    );
    assert!(!into.exists(), "no directory was made");
}

#[test]
fn a_snapshot_that_inflates_past_its_cap_leaves_nothing() {
    // 8 MiB of zeros packs to a few KiB: the cap is checked on what it unpacks to.
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "small", "first");
    fs::write(src.path().join("zeros"), vec![0u8; 8 << 20]).unwrap();
    let snap = pack(src.path(), Caps::default()).unwrap();
    assert!(snap.bytes.len() < 100_000, "{}", snap.bytes.len());
    let dst = tempfile::tempdir().unwrap();
    let caps = Caps {
        max_bytes: 1 << 20,
        max_files: 100,
    };
    let e = unpack(&snap.bytes, &snap.digest, dst.path(), caps)
        .unwrap_err()
        .to_string();
    assert!(e.contains("at most 1048576 allowed"), "{e}");
    assert_eq!(
        fs::read_dir(dst.path()).unwrap().count(),
        0,
        "the target stays empty"
    );
}

#[test]
fn crafted_entries_are_refused_and_nothing_is_written() {
    use tar::EntryType::{Block, Link, Regular, Symlink};
    let cases: [(&[Crafted], &str); 7] = [
        (&[("../escape", Regular, "x")], "leaves the workspace"),
        (&[("/etc/owned", Regular, "x")], "leaves the workspace"),
        (
            &[("ok", Regular, "x"), ("link", Symlink, "../..")],
            "target leaves",
        ),
        (&[("abs", Symlink, "/etc")], "target leaves"),
        (
            &[("dir", Symlink, "."), ("dir/through", Regular, "x")],
            "lies under a link",
        ),
        (&[("a", Regular, "x"), ("a", Regular, "y")], "appears twice"),
        (&[("hard", Link, "ok")], "hard link, device or fifo"),
    ];
    for (entries, expected) in cases {
        let snap = crafted(entries);
        let dst = tempfile::tempdir().unwrap();
        let e = unpack(&snap.bytes, &snap.digest, dst.path(), Caps::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(expected), "{entries:?}: {e}");
        assert!(!e.contains('\n'));
        assert_eq!(
            fs::read_dir(dst.path()).unwrap().count(),
            0,
            "{entries:?} left something"
        );
    }
    let device = crafted(&[("dev", Block, "")]);
    let dst = tempfile::tempdir().unwrap();
    assert!(unpack(&device.bytes, &device.digest, dst.path(), Caps::default()).is_err());
    // A link that stays inside is kept.
    let fine = crafted(&[("d/x", Regular, "x"), ("d/up", Symlink, "../d/x")]);
    let dst = tempfile::tempdir().unwrap();
    unpack(&fine.bytes, &fine.digest, dst.path(), Caps::default()).unwrap();
    assert_eq!(fs::read_to_string(dst.path().join("d/up")).unwrap(), "x");
}

#[test]
fn a_target_that_is_not_empty_is_refused() {
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "f", "1");
    let snap = pack(src.path(), Caps::default()).unwrap();
    let dst = tempfile::tempdir().unwrap();
    write(dst.path(), "already", "here");
    let e = unpack(&snap.bytes, &snap.digest, dst.path(), Caps::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not empty"), "{e}");
    assert_eq!(listing(dst.path()), ["already = here"]);
}
