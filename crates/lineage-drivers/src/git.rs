//! A root's files from a git repository (issue 39: `lineage spawn --git URL --ref REF`): the
//! node clones it, as its operator allows.
//!
//! The program is always `git`; what the wire brings (the URL and the ref) are arguments, checked
//! first: a URL whose protocol is not in the node's `agents.git_protocols` (default `https` and
//! `ssh`: a client cannot make the node read its own local repositories, and `ext::` or any
//! other command transport is never allowed), one that starts with `-`, a ref that is not a
//! plain branch or tag name. git is then held to the same protocols (`GIT_ALLOW_PROTOCOL`, which
//! also covers redirects and submodules), never prompts (`GIT_TERMINAL_PROMPT=0`), reads no
//! system config, and is stopped after [`CLONE_TIMEOUT`]. The clone is shallow (`--depth 1`,
//! `--branch REF`); the caller packs it (without `.git`) as the session's base.

use std::path::Path;
use std::time::Duration;

use crate::error::DriverError;

/// The protocols a node allows when its config names none.
pub const DEFAULT_PROTOCOLS: [&str; 2] = ["https", "ssh"];

/// How long a clone may take.
pub const CLONE_TIMEOUT: Duration = Duration::from_secs(300);

/// The protocol `url` uses: the scheme before `://`, `ssh` for `user@host:path`, `file` for an
/// absolute path.
fn protocol_of(url: &str) -> Option<String> {
    if let Some((scheme, _)) = url.split_once("://") {
        return Some(scheme.to_ascii_lowercase());
    }
    if let Some((scheme, _)) = url.split_once("::") {
        // git's transport syntax (`ext::...`, `fd::...`): a helper program, never allowed.
        return Some(scheme.to_ascii_lowercase());
    }
    if url.starts_with('/') {
        return Some("file".into());
    }
    match url.split_once(':') {
        Some((host, _)) if host.contains('@') || !host.contains('/') => Some("ssh".into()),
        _ => None,
    }
}

/// Checks `url` and `reference` against `protocols` (see the module docs): one line saying
/// what is refused and what to do.
pub fn check(url: &str, reference: &str, protocols: &[String]) -> Result<(), DriverError> {
    let bad = |m: String| Err(DriverError::BadRequest(m));
    if url.is_empty() || url.starts_with('-') || url.chars().any(char::is_whitespace) {
        return bad(format!(
            "--git {url:?} is not a repository URL; give e.g. https://host/org/repo.git"
        ));
    }
    let Some(protocol) = protocol_of(url) else {
        return bad(format!(
            "--git {url:?} names no protocol; give e.g. https://host/org/repo.git"
        ));
    };
    if !protocols.contains(&protocol) {
        return bad(format!(
            "--git {url:?}: protocol {protocol} is not allowed on this node (agents.git_protocols = {protocols:?}); use one of those, or ask the operator"
        ));
    }
    let plain = !reference.is_empty()
        && !reference.starts_with('-')
        && !reference.contains("..")
        && reference
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if !plain {
        return bad(format!(
            "--ref {reference:?} is not a branch or tag name (letters, digits, '.', '_', '-', '/'); give e.g. --ref main"
        ));
    }
    Ok(())
}

/// Clones `reference` of `url` (checked by [`check`]) into `into` (which must not exist).
pub async fn clone(
    url: &str,
    reference: &str,
    protocols: &[String],
    into: &Path,
) -> Result<(), DriverError> {
    check(url, reference, protocols)?;
    let mut command = tokio::process::Command::new("git");
    command
        .args([
            "clone",
            "--quiet",
            "--depth",
            "1",
            "--single-branch",
            "--branch",
        ])
        .arg(reference)
        .arg("--")
        .arg(url)
        .arg(into)
        .env("GIT_ALLOW_PROTOCOL", protocols.join(":"))
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_ASKPASS", "true")
        .env("SSH_ASKPASS", "true")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().map_err(|e| {
        DriverError::Internal(format!(
            "cannot run git to clone {url}: {e}; install git on the node"
        ))
    })?;
    let out = tokio::time::timeout(CLONE_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| {
            DriverError::BadRequest(format!(
                "git clone of {url} at {reference} took longer than {} s; give a smaller repository or a closer URL",
                CLONE_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| DriverError::Internal(format!("git clone of {url}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = stderr
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("git gave no reason");
    Err(DriverError::BadRequest(format!(
        "git clone of {url} at {reference} failed: {why}; check the URL and that the ref is a branch or tag"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn only_the_allowed_protocols_and_plain_refs_pass() {
        let default = allowed(&DEFAULT_PROTOCOLS);
        assert!(check("https://github.com/o/r.git", "main", &default).is_ok());
        assert!(check("git@github.com:o/r.git", "v1.2", &default).is_ok());
        for (url, why) in [
            ("file:///srv/repo", "protocol file is not allowed"),
            ("/srv/repo", "protocol file is not allowed"),
            ("ext::sh -c touch% /tmp/x", "not a repository URL"),
            ("ext::sh", "protocol ext is not allowed"),
            ("fd::3", "protocol fd is not allowed"),
            ("--upload-pack=touch", "not a repository URL"),
            ("relative/path", "names no protocol"),
        ] {
            let err = check(url, "main", &default).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
            assert!(!err.contains('\n'));
        }
        for reference in ["-b", "main..x", "a b", ""] {
            let err = check("https://h/r", reference, &default)
                .unwrap_err()
                .to_string();
            assert!(err.contains("--ref"), "{reference}: {err}");
        }
        assert!(check("file:///srv/repo", "main", &allowed(&["file"])).is_ok());
    }
}
