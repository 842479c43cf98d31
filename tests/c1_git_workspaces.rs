//! Issue 39: `lineage spawn --git URL --ref REF`: the hosting node clones a repository (here a
//! local one, `file://`, which this cluster's `agents.git_protocols` allows; nothing from the
//! internet) and the root's agent starts in its files at that ref, without `.git`. A URL of a
//! protocol the node does not allow (git's `ext::` command transport, or `https` here), a ref
//! that is not a branch or tag name, and a ref the repository lacks are refused in one line,
//! and nothing runs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lineage_testkit::binary::delegator_profiles;
use lineage_testkit::prelude::{id_of, Cluster, Event};

const T: Duration = Duration::from_secs(60);

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A repository with two commits: `v1` tags the first (README says one), `main` has the second.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "--quiet", "--initial-branch", "main"]);
    git(d, &["config", "user.email", "t@example.com"]);
    git(d, &["config", "user.name", "t"]);
    std::fs::write(d.join("README"), "version one\n").unwrap();
    git(d, &["add", "README"]);
    git(d, &["commit", "--quiet", "-m", "one"]);
    git(d, &["tag", "v1"]);
    std::fs::write(d.join("README"), "version two\n").unwrap();
    git(d, &["commit", "--quiet", "-am", "two"]);
    dir
}

fn replies(log: &[Event]) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "turn/assistant")
        .map(|e| e.data["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn c1_a_root_starts_in_a_clone_of_a_repository_at_its_ref_and_bad_urls_are_refused() {
    let toml = format!(
        "[agents]\ngit_protocols = [\"file\"]\n\n{}",
        delegator_profiles()
    );
    let c = Cluster::start_with_toml(1, &[], &toml);
    let repo = repository();
    let url = format!("file://{}", repo.path().display());
    for (reference, expect) in [("v1", "version one"), ("main", "version two")] {
        let reply = c.spawn(&[
            "--profile",
            "delegator",
            "--git",
            &url,
            "--ref",
            reference,
            "--prompt",
            "sh: cat README; ls -A",
        ]);
        let root = id_of(&reply["session"]);
        let log = c.wait_log(&root, T, "the first reply", |l| !replies(l).is_empty());
        let reply = &replies(&log)[0];
        assert!(reply.contains(expect), "{reference}: {reply}");
        assert!(!reply.contains(".git"), "the clone's files only: {reply}");
    }

    let before = c.cli_json(&["ls"])["sessions"].as_array().map(Vec::len);
    for (url, reference, why) in [
        (
            "ext::sh -c touch% /tmp/lineage-pwned",
            "main",
            "not a repository URL",
        ),
        ("ext::sh", "main", "protocol ext is not allowed"),
        (
            "https://example.invalid/r.git",
            "main",
            "protocol https is not allowed",
        ),
        (url.as_str(), "-u", "is not a branch or tag name"),
        (url.as_str(), "no-such-branch", "failed"),
    ] {
        let (code, _, err) = c.cli(&[
            "spawn",
            "--profile",
            "delegator",
            "--git",
            url,
            "--ref",
            reference,
        ]);
        assert_eq!(code, 2, "{url} {reference}: {err}");
        assert!(
            err.contains(why) && err.trim().lines().count() == 1,
            "{url} {reference}: {err}"
        );
    }
    assert!(!Path::new("/tmp/lineage-pwned").exists());
    // Nothing was born.
    assert_eq!(
        c.cli_json(&["ls"])["sessions"].as_array().map(Vec::len),
        before
    );
}
