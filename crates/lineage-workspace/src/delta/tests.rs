//! Tests of incremental checkpoints (issue 39: "checkpointed at each turn's end
//! (incrementally where the format allows)"): a delta holds only what changed, lays over its
//! base to the directory as packed, and crafted deltas are refused with nothing written.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::snapshot::tests::{crafted, listing, write};
use crate::{pack, unpack, unpack_layers, Digest};

fn base_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "src/lib.rs", "fn a() {}\n");
    write(root, "src/keep.rs", "kept\n");
    write(root, "docs/old/notes.md", "old notes\n");
    write(root, "README", "readme\n");
    // 200 kB that do not compress (a linear congruential sequence, as hex).
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let noise: String = (0..25_000)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            format!("{:08x}", x >> 32)
        })
        .collect();
    write(root, "big.bin", &noise);
    std::os::unix::fs::symlink("src/lib.rs", root.join("lib")).unwrap();
    dir
}

fn layer(s: &Snapshot) -> Layer<'_> {
    Layer {
        bytes: &s.bytes,
        digest: &s.digest,
    }
}

fn names(delta: &Snapshot) -> Vec<String> {
    let mut archive = tar::Archive::new(GzDecoder::new(&delta.bytes[..]));
    let mut out: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn a_delta_holds_only_what_changed_and_lays_over_its_base_to_the_directory() {
    let dir = base_dir();
    let root = dir.path();
    let base = pack(root, Caps::default()).unwrap();
    let manifest = Manifest::read(layer(&base), Caps::default()).unwrap();
    assert_eq!(manifest.len(), 9, "{manifest:?}");

    // Unchanged: an empty delta.
    let none = pack_delta(root, &manifest, Caps::default()).unwrap();
    assert_eq!(none.changed, 0);
    assert_eq!(names(&none.snapshot), Vec::<String>::new());

    // A turn's work: one file edited, one added in a new directory, a directory removed, a
    // mode changed, a link pointed elsewhere.
    write(root, "src/lib.rs", "fn a() { fixed() }\n");
    write(root, "tests/new.rs", "new\n");
    fs::remove_dir_all(root.join("docs")).unwrap();
    fs::set_permissions(root.join("README"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::remove_file(root.join("lib")).unwrap();
    std::os::unix::fs::symlink("src/keep.rs", root.join("lib")).unwrap();
    let delta = pack_delta(root, &manifest, Caps::default()).unwrap();
    assert_eq!(
        names(&delta.snapshot),
        [
            "put/README",
            "put/lib",
            "put/src/lib.rs",
            "put/tests",
            "put/tests/new.rs",
            "removed/docs",
            "removed/docs/old",
            "removed/docs/old/notes.md",
        ]
    );
    assert_eq!(delta.changed, 8);
    assert!(
        delta.snapshot.bytes.len() < base.bytes.len() / 4,
        "the 200 kB file is not in the delta: {} against {}",
        delta.snapshot.bytes.len(),
        base.bytes.len()
    );

    let restored = tempfile::tempdir().unwrap();
    let into = restored.path().join("w");
    unpack_layers(
        layer(&base),
        Some(layer(&delta.snapshot)),
        &into,
        Caps::default(),
    )
    .unwrap();
    assert_eq!(listing(&into), listing(root));
    let mode = fs::metadata(into.join("README"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755);

    // What the base held is the base's: the delta against it holds it again after a revert.
    write(root, "src/lib.rs", "fn a() {}\n");
    let reverted = pack_delta(root, &manifest, Caps::default()).unwrap();
    assert!(!names(&reverted.snapshot).contains(&"put/src/lib.rs".to_owned()));
}

#[test]
fn a_file_replaced_by_a_directory_and_back_restores() {
    let dir = base_dir();
    let root = dir.path();
    let base = pack(root, Caps::default()).unwrap();
    let manifest = Manifest::read(layer(&base), Caps::default()).unwrap();
    fs::remove_file(root.join("README")).unwrap();
    write(root, "README/inside", "now a directory\n");
    fs::remove_dir_all(root.join("src")).unwrap();
    write(root, "src", "now a file\n");
    let delta = pack_delta(root, &manifest, Caps::default()).unwrap();
    let restored = tempfile::tempdir().unwrap();
    let into = restored.path().join("w");
    unpack_layers(
        layer(&base),
        Some(layer(&delta.snapshot)),
        &into,
        Caps::default(),
    )
    .unwrap();
    assert_eq!(listing(&into), listing(root));
}

#[test]
fn a_delta_is_held_to_the_caps_of_the_whole_directory() {
    let dir = base_dir();
    let root = dir.path();
    let base = pack(root, Caps::default()).unwrap();
    let manifest = Manifest::read(layer(&base), Caps::default()).unwrap();
    let caps = Caps {
        max_bytes: 100_000,
        max_files: 1000,
    };
    let line = pack_delta(root, &manifest, caps).unwrap_err().to_string();
    assert!(line.contains("at most 100000 allowed"), "{line}");
}

#[test]
fn crafted_deltas_are_refused_and_nothing_is_written() {
    let dir = base_dir();
    let base = pack(dir.path(), Caps::default()).unwrap();
    let cases: [(&[crate::snapshot::tests::Crafted], &str); 5] = [
        (
            &[("src/lib.rs", tar::EntryType::Regular, "x")],
            "neither under put/",
        ),
        (
            &[("put/../../x", tar::EntryType::Regular, "x")],
            "leaves the workspace",
        ),
        (
            &[("removed/README", tar::EntryType::Regular, "data")],
            "not an empty file",
        ),
        (
            &[
                ("put/ln", tar::EntryType::Symlink, "src"),
                ("put/ln/evil", tar::EntryType::Regular, "x"),
            ],
            "lies under a link",
        ),
        (
            &[
                ("put/README", tar::EntryType::Regular, "a"),
                ("removed/README", tar::EntryType::Regular, ""),
            ],
            "appears twice",
        ),
    ];
    for (entries, expected) in cases {
        let delta = crafted(entries);
        let into = tempfile::tempdir().unwrap();
        let target = into.path().join("w");
        let line = unpack_layers(layer(&base), Some(layer(&delta)), &target, Caps::default())
            .unwrap_err()
            .to_string();
        assert!(line.contains(expected), "{expected}: {line}");
        assert!(!target.exists(), "nothing written for {expected}");
    }
    // A damaged delta: refused before the base is unpacked.
    let good = crafted(&[("put/x", tar::EntryType::Regular, "x")]);
    let wrong = Digest::of(b"other");
    let target = tempfile::tempdir().unwrap().path().join("w");
    let damaged = Layer {
        bytes: &good.bytes,
        digest: &wrong,
    };
    let line = unpack_layers(layer(&base), Some(damaged), &target, Caps::default())
        .unwrap_err()
        .to_string();
    assert!(line.contains("damaged"), "{line}");
    // A delta is not a whole snapshot: unpacked alone its halves are just directories, which
    // is why the log marks a checkpoint that is one (WorkspaceSnapshot::changed).
    let alone = tempfile::tempdir().unwrap();
    unpack(
        &good.bytes,
        &good.digest,
        &alone.path().join("w"),
        Caps::default(),
    )
    .unwrap();
    assert!(alone.path().join("w/put/x").exists());
}
