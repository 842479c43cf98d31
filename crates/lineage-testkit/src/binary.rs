//! [`lineage_bin`]: where the `lineage` binary under test is, for suites outside the `lineage`
//! package (which cannot use `env!("CARGO_BIN_EXE_lineage")`); [`lab_bin`]: the lab,
//! `lineage-lab`, which `lineage bench` and `lineage chaos` run (it must be beside it).
//!
//! `$LINEAGE_BIN` when set (taken as is); otherwise `target/<profile>/lineage`, found from the
//! running test executable (`target/<profile>/deps/<test>-<hash>`). Cargo does not build another
//! package's binary for a test, so `scripts/test.sh` runs `cargo build --workspace --bins`
//! first; a missing binary, or one older than a source file of the workspace (a stale build),
//! panics with one line saying what to run.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

/// What to run when the binary is missing or stale.
const BUILD_IT: &str = "run `cargo build -p lineage -p lineage-lab --bins` first (scripts/test.sh does), or set LINEAGE_BIN";

/// The `lineage` binary under test (checked once per test process).
pub fn lineage_bin() -> PathBuf {
    BIN.get_or_init(find).clone()
}

/// The binary [`lineage_bin`] found or was given.
static BIN: OnceLock<PathBuf> = OnceLock::new();

/// The lab, `lineage-lab`, beside [`lineage_bin`] (checked once per test process: missing or
/// older than its sources panics with what to run). The suites of `lineage bench` and
/// `lineage chaos` call it first, since those verbs run it.
pub fn lab_bin() -> PathBuf {
    static LAB: OnceLock<PathBuf> = OnceLock::new();
    LAB.get_or_init(|| {
        let lab = lineage_bin().with_file_name("lineage-lab");
        checked(&lab);
        lab
    })
    .clone()
}

/// Makes [`lineage_bin`] answer `path` in this process (a harness run by the `lineage` binary
/// itself, `lineage chaos`, gives its own executable). False when [`lineage_bin`] was already
/// asked, and keeps its first answer.
pub fn set_lineage_bin(path: PathBuf) -> bool {
    BIN.set(path).is_ok()
}

fn find() -> PathBuf {
    if let Some(bin) = std::env::var_os("LINEAGE_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test> -> target/<profile>/lineage
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test executable under target/<profile>/deps");
    let bin = profile_dir.join("lineage");
    checked(&bin);
    bin
}

/// Panics when the binary at `bin` is missing or older than a source its dep-info
/// (`<bin>.d`, beside it) lists.
fn checked(bin: &Path) {
    let built = match std::fs::metadata(bin).and_then(|m| m.modified()) {
        Ok(built) => built,
        Err(_) => panic!("no binary at {}; {BUILD_IT}", bin.display()),
    };
    if let Some(newer) = newer_source(&bin.with_extension("d"), built) {
        panic!(
            "the binary at {} is older than its source {}; {BUILD_IT}",
            bin.display(),
            newer.display()
        );
    }
}

/// A source of the binary modified after `built`: the files cargo's dep-info `depinfo`
/// (`target/<profile>/lineage.d`, make syntax) lists. `None` when there is none, or no
/// dep-info to read.
fn newer_source(depinfo: &Path, built: SystemTime) -> Option<PathBuf> {
    let text = std::fs::read_to_string(depinfo).ok()?;
    // One rule: `target/<profile>/lineage: a.rs b.rs ...` (a space in a path is `\ `).
    let (_, deps) = text.lines().next()?.split_once(": ")?;
    let mut paths = Vec::new();
    let mut current = String::new();
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            c if c.is_whitespace() => {
                if !current.is_empty() {
                    paths.push(PathBuf::from(std::mem::take(&mut current)));
                }
            }
            c => current.push(c),
        }
    }
    paths.extend((!current.is_empty()).then(|| PathBuf::from(current)));
    paths.into_iter().find(|p| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .is_ok_and(|m| m > built)
    })
}

/// The workspace root (two levels above this crate): where `config/` and `Cargo.lock` are.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Node config profiles for the suites that run real ACP agents (issue 11): `delegator`, the ACP
/// test agent (built next to `lineage`) with the delegation tools (stdio); `delegator-http`, the
/// same agent declaring `mcpCapabilities.http` (so it gets the tools over HTTP; `isolation =
/// "none"`, since an HTTP request cannot be bound to a sandbox, V1); and `echo`, a
/// script. Panics
/// with what to build when the test agent is missing.
pub fn delegator_profiles() -> String {
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    assert!(
        agent.exists(),
        "{} is missing: cargo build --workspace --bins",
        agent.display()
    );
    format!(
        "[agents.delegator]\ndriver = \"acp\"\ncommand = \"{agent}\"\ntools = true\n\n[agents.delegator-http]\ndriver = \"acp\"\ncommand = \"{agent}\"\nargs = [\"--mcp-http\"]\ntools = true\nisolation = \"none\"\n\n[agents.echo]\ndriver = \"script\"\n",
        agent = agent.display()
    )
}
