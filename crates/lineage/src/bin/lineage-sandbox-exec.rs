//! `lineage-sandbox-exec` (V2): the first program of a warm sandbox. It reads one launch line
//! ([`SandboxLaunch`], JSON) from its stdin, unbuffered so that nothing after the line is taken
//! from the agent, then replaces itself with the agent (`execve`) in the given directory with
//! exactly the given environment. Started by a hosting node inside a sandbox it made (the node
//! looks for it beside its own `lineage`); not for people.
//!
//! A program of its own, not a verb of `lineage`: a node makes one per warm sandbox, and this
//! small binary starts in about a third of the CPU time (`lineage`'s start is mostly the
//! relocation of its 50 MB; see benches/README.md, "The sandbox's cost").

use std::io::Read;
use std::os::unix::process::CommandExt;

use lineage_protocol::sandbox::{SandboxLaunch, MAX_LAUNCH_LINE};

fn main() {
    std::process::exit(run());
}

/// Reads the launch line and execs it; returns only on failure (exit code 127).
fn run() -> i32 {
    let line = match read_line() {
        Ok(line) => line,
        Err(why) => return fail(&why),
    };
    let launch: SandboxLaunch = match serde_json::from_slice(&line) {
        Ok(launch) => launch,
        Err(e) => return fail(&format!("the launch line is not a launch: {e}")),
    };
    let Some((program, args)) = launch.argv.split_first() else {
        return fail("the launch line names no program");
    };
    // PATH lookup uses the launch's own PATH, the agent's.
    let path = launch
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    let resolved = resolve(program, path.as_deref());
    let e = std::process::Command::new(&resolved)
        .args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.cwd)
        .exec();
    fail(&format!("cannot start {program}: {e}"))
}

/// `program` itself when it has a slash, else the first match on `path`.
fn resolve(program: &str, path: Option<&str>) -> std::path::PathBuf {
    if program.contains('/') {
        return program.into();
    }
    path.unwrap_or("")
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| program.into())
}

/// One line from fd 0, a byte at a time (stdin is not read beyond it).
fn read_line() -> Result<Vec<u8>, String> {
    // SAFETY: fd 0 is open for the process's life; ManuallyDrop keeps it open after use.
    let mut stdin = std::mem::ManuallyDrop::new(unsafe {
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(0)
    });
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    // Bounded by MAX_LAUNCH_LINE.
    while line.len() < MAX_LAUNCH_LINE {
        match stdin.read(&mut byte) {
            Ok(0) => return Err("stdin closed before a launch line".into()),
            Ok(_) if byte[0] == b'\n' => return Ok(line),
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read the launch line: {e}")),
        }
    }
    Err(format!(
        "the launch line is longer than {MAX_LAUNCH_LINE} bytes"
    ))
}

fn fail(why: &str) -> i32 {
    eprintln!("error: lineage-sandbox-exec: {why}");
    127
}
