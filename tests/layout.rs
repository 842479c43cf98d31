//! The top-level `tests/` package runs every suite in it: each `tests/<suite>.rs` has a
//! `[[test]]` entry in `tests/Cargo.toml` (cargo does not find them on its own here, and an
//! unlisted suite would silently never run).

#[test]
fn every_suite_file_is_a_listed_test_target() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("read tests/Cargo.toml");
    let unlisted: Vec<String> = std::fs::read_dir(dir)
        .expect("read tests/")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.ends_with(".rs"))
        .filter(|name| !manifest.contains(&format!("path = \"{name}\"")))
        .collect();
    assert!(
        unlisted.is_empty(),
        "tests/{unlisted:?} not listed in tests/Cargo.toml; add a [[test]] entry (name, path) for each"
    );
}
