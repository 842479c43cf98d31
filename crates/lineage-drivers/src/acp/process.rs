//! The agent's process: spawned with piped stdio in a process group of its own, the last lines
//! of its stderr kept for error messages, its exit status read when a connection breaks.
//!
//! An adapter is rarely the whole agent: `claude-agent-acp` runs the Claude CLI, `codex-acp`
//! its exec sandbox, and every agent starts tool processes and MCP servers. Stopping the agent
//! (X3) signals the whole group, `SIGTERM` then `SIGKILL` after a grace, and waits for the
//! adapter; dropping a [`Process`] kills the group. A process that leaves the group on its own
//! (`setsid`) escapes this; per-session isolation (V2) is what contains it.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::text::{agent_error, one_line};
use crate::error::DriverError;

/// Lines of the agent's stderr kept for error messages.
const STDERR_TAIL: usize = 20;
/// How long a broken connection waits for the agent's exit status.
const EXIT_WAIT: Duration = Duration::from_millis(300);
/// How long [`Process::stop`] waits for the killed agent to exit.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// How long the group has to end after `SIGTERM` before it gets `SIGKILL`.
const TERM_GRACE: Duration = Duration::from_millis(500);

/// A running agent program.
#[derive(Debug)]
pub(super) struct Process {
    child: Child,
    /// The agent's process group (its own pid), when it started.
    group: Option<i32>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

/// A freshly spawned agent with the two ends of its stdio the connection speaks over.
pub(super) struct Spawned {
    /// The process.
    pub(super) process: Process,
    /// Its stdin (the driver writes).
    pub(super) stdin: ChildStdin,
    /// Its stdout (the driver reads).
    pub(super) stdout: ChildStdout,
}

impl Process {
    /// Spawns `command` (program, then arguments) in `cwd`, with exactly `env` when given (else
    /// the node's environment), stdio piped; `session` labels its stderr in the node's log.
    pub(super) fn spawn(
        command: &[String],
        cwd: &Path,
        env: Option<&BTreeMap<String, String>>,
        session: &str,
    ) -> Result<Spawned, DriverError> {
        let program = command.first().map(String::as_str).unwrap_or("");
        let mut cmd = Command::new(program);
        if let Some(env) = env {
            cmd.env_clear().envs(env);
        }
        let mut child = cmd
            .args(command.get(1..).unwrap_or_default())
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so that stopping it reaches every process it started.
            .process_group(0)
            .spawn()
            .map_err(|e| agent_error(session, program, &format!("cannot start it: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(DriverError::Internal(
                "an ACP agent was spawned without piped stdio".into(),
            ));
        };
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        tokio::spawn(collect_stderr(stderr, tail.clone(), session.to_owned()));
        let group = child.id().and_then(|pid| i32::try_from(pid).ok());
        Ok(Spawned {
            process: Process {
                child,
                group,
                stderr: tail,
            },
            stdin,
            stdout,
        })
    }

    /// "; the agent exited (status); its last stderr line: ..." as far as known.
    pub(super) async fn exit_detail(&mut self) -> String {
        let mut detail = String::new();
        if let Ok(Ok(status)) = tokio::time::timeout(EXIT_WAIT, self.child.wait()).await {
            detail.push_str(&format!("; the agent exited ({status})"));
            // Give the stderr reader a moment to catch the agent's last words.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let last = self
            .stderr
            .lock()
            .ok()
            .and_then(|tail| tail.back().cloned());
        if let Some(line) = last {
            detail.push_str(&format!("; its last stderr line: {}", one_line(&line)));
        }
        detail
    }

    /// Stops the agent's whole process group (X3): `SIGTERM`, a grace, then `SIGKILL`; waits
    /// (briefly) for the adapter to exit.
    pub(super) async fn stop(&mut self, session: &str) {
        signal_group(self.group, libc::SIGTERM);
        if tokio::time::timeout(TERM_GRACE, self.child.wait())
            .await
            .is_err()
        {
            tracing::debug!(session = %session, "ACP agent did not end on SIGTERM; killing its group");
        }
        // The adapter may have ended while processes it started did not: the group gets
        // SIGKILL either way (an empty group is a no-op).
        signal_group(self.group, libc::SIGKILL);
        if let Err(e) = self.child.start_kill() {
            tracing::debug!(session = %session, error = %e, "ACP agent already exited");
        }
        drop(tokio::time::timeout(STOP_WAIT, self.child.wait()).await);
        self.group = None;
    }
}

impl Drop for Process {
    /// A driver dropped without [`Process::stop`] (a failed start, a node shutting down) still
    /// leaves no process of the agent behind.
    fn drop(&mut self) {
        signal_group(self.group.take(), libc::SIGKILL);
    }
}

/// Sends `signal` to process group `group` (nothing when unknown or already gone).
fn signal_group(group: Option<i32>, signal: libc::c_int) {
    if let Some(group) = group.filter(|g| *g > 1) {
        // SAFETY: kill(2) with a negative pid signals that process group; it touches no memory
        // of ours. ESRCH (the group is gone) is the expected outcome after an exit.
        unsafe {
            libc::kill(-group, signal);
        }
    }
}

/// Reads the agent's stderr line by line, keeping the last lines for error messages.
async fn collect_stderr(
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
    label: String,
) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(session = %label, line = %line, "ACP agent stderr");
        if line.trim().is_empty() {
            continue;
        }
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
}
