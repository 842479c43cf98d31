//! The agent's process: spawned with piped stdio in a process group of its own, the last lines
//! of its stderr kept for error messages, its exit status read when a connection breaks.
//!
//! An adapter is rarely the whole agent: `claude-agent-acp` runs the Claude CLI, `codex-acp`
//! its exec sandbox, and every agent starts tool processes and MCP servers. Stopping the agent
//! (X3) signals the whole group, `SIGTERM` then `SIGKILL` after a grace, and waits for the
//! adapter; dropping a [`Process`] kills the group. A process that leaves the group on its own
//! (`setsid`) escapes this; a sandbox (V2, [`crate::sandbox`]) contains it: a sandboxed agent's
//! stop sends `SIGTERM` to every process of its pid namespace, then `SIGKILL` to the
//! namespace's first process, which makes the kernel kill all the others.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::text::{agent_error, one_line};
use crate::error::DriverError;
use crate::sandbox::{Confinement, SandboxInfo, SandboxPlan};

/// Lines of the agent's stderr kept for error messages.
const STDERR_TAIL: usize = 20;
/// How long a broken connection waits for the agent's exit status.
const EXIT_WAIT: Duration = Duration::from_millis(300);
/// How long [`Process::stop`] waits for the killed agent to exit.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// How long the group has to end after `SIGTERM` before it gets `SIGKILL`.
const TERM_GRACE: Duration = Duration::from_millis(500);
/// How long a sandbox has to come up (bubblewrap writes its info) before the start fails.
const SANDBOX_WAIT: Duration = Duration::from_secs(10);

/// A running agent program.
#[derive(Debug)]
pub(super) struct Process {
    child: Child,
    /// The agent's process group (its own pid), when it started.
    group: Option<i32>,
    /// Its sandbox, when it runs in one.
    sandbox: Option<SandboxInfo>,
    /// The uid its sandbox runs as, held as long as the process (a warm sandbox's).
    lease: Option<crate::sandbox::UidLease>,
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
    /// the node's environment), stdio piped, in `sandbox` when given; `session` labels its
    /// stderr in the node's log.
    pub(super) async fn spawn(
        command: &[String],
        cwd: &Path,
        env: Option<&BTreeMap<String, String>>,
        sandbox: Option<&SandboxPlan>,
        session: &str,
    ) -> Result<Spawned, DriverError> {
        let program = command.first().map(String::as_str).unwrap_or("");
        let info = match sandbox {
            Some(_) => Some(InfoPipe::new().map_err(|e| {
                agent_error(
                    session,
                    program,
                    &format!("cannot make its sandbox's pipe: {e}"),
                )
            })?),
            None => None,
        };
        let mut cmd = match (sandbox, &info) {
            (Some(plan), Some(info)) => {
                let mut cmd = Command::new(&plan.bwrap);
                cmd.args(plan.args(info.write, command));
                if let Some(uid) = plan.uid {
                    // The sandbox's own user outside its namespaces (V2, a root node).
                    cmd.uid(uid).gid(uid);
                }
                let write = info.write;
                // SAFETY: between fork and exec only fcntl(2) runs, on a descriptor this
                // process owns: the pipe's write end stays open in bubblewrap (and only there).
                unsafe {
                    cmd.pre_exec(move || {
                        if libc::fcntl(write, libc::F_SETFD, 0) == -1 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                cmd
            }
            _ => {
                let mut cmd = Command::new(program);
                cmd.args(command.get(1..).unwrap_or_default());
                cmd
            }
        };
        if let Some(env) = env {
            cmd.env_clear().envs(env);
        }
        let spawned = cmd
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so that stopping it reaches every process it started.
            .process_group(0)
            .spawn();
        let (sandboxed, info) = match info {
            Some(mut info) => {
                info.close_write();
                (true, Some(info))
            }
            None => (false, None),
        };
        let mut child = spawned.map_err(|e| match sandboxed {
            true => agent_error(session, program, &format!("cannot start its sandbox: {e}")),
            false => agent_error(session, program, &format!("cannot start it: {e}")),
        })?;
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
        let mut process = Process {
            child,
            group,
            sandbox: None,
            lease: None,
            stderr: tail,
        };
        if let Some(info) = info {
            match info.read().await {
                Ok(sandbox) => {
                    tracing::debug!(
                        session = %session,
                        pid_namespace = sandbox.pid_namespace,
                        "ACP agent started in its sandbox"
                    );
                    process.sandbox = Some(sandbox);
                }
                Err(why) => {
                    let detail = process.exit_detail().await;
                    return Err(agent_error(
                        session,
                        program,
                        &format!("its sandbox did not start: {why}{detail}"),
                    ));
                }
            }
        }
        Ok(Spawned {
            process,
            stdin,
            stdout,
        })
    }

    /// Holds `lease` (its sandbox's uid) as long as the process.
    pub(super) fn hold(&mut self, lease: Option<crate::sandbox::UidLease>) {
        self.lease = lease;
    }

    /// Whether the first program still runs.
    pub(super) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Which processes are this agent's, for binding its tools connections (V1): its sandbox,
    /// else its process tree. `None` once it was stopped.
    pub(super) fn confinement(&self) -> Option<Confinement> {
        match (self.sandbox, self.group) {
            (Some(info), _) => Some(Confinement::Sandbox(info)),
            (None, Some(leader)) => Some(Confinement::Tree { leader }),
            (None, None) => None,
        }
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
        if let Some(info) = self.sandbox {
            // Every process of the sandbox, also those that left the group (its first
            // process, the namespace's init, ignores SIGTERM).
            for pid in crate::sandbox::members(info.pid_namespace) {
                signal(pid, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(TERM_GRACE, self.child.wait())
            .await
            .is_err()
        {
            tracing::debug!(session = %session, "ACP agent did not end on SIGTERM; killing its group");
        }
        // The adapter may have ended while processes it started did not: the group gets
        // SIGKILL either way (an empty group is a no-op).
        signal_group(self.group, libc::SIGKILL);
        kill_sandbox(self.sandbox.take());
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
        kill_sandbox(self.sandbox.take());
    }
}

/// `SIGKILL` to a sandbox's first process: the kernel then kills every process of its pid
/// namespace. Checked against the namespace first, so a reused pid is never signalled.
fn kill_sandbox(sandbox: Option<SandboxInfo>) {
    if let Some(info) = sandbox {
        if crate::sandbox::pid_namespace(info.child_pid) == Some(info.pid_namespace) {
            signal(info.child_pid, libc::SIGKILL);
        }
    }
}

/// Sends `sig` to process `pid` (nothing for pid 1 or below, or when it is gone).
fn signal(pid: i32, sig: libc::c_int) {
    if pid > 1 {
        // SAFETY: kill(2) touches no memory of ours; ESRCH (gone) is an expected outcome.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The pipe bubblewrap writes its sandbox's info to (`--info-fd`): the write end is inherited
/// by bubblewrap only, the read end stays here.
struct InfoPipe {
    read: Option<std::os::fd::OwnedFd>,
    write: i32,
    write_owned: Option<std::os::fd::OwnedFd>,
}

impl InfoPipe {
    fn new() -> std::io::Result<InfoPipe> {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array, which we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nothing else.
        let (read, write) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        Ok(InfoPipe {
            read: Some(read),
            write: fds[1],
            write_owned: Some(write),
        })
    }

    /// Closes this process's write end (bubblewrap holds its own), so the read ends at its exit.
    fn close_write(&mut self) {
        self.write_owned = None;
    }

    /// The sandbox's info, once bubblewrap wrote it; the reason when it exited first.
    async fn read(mut self) -> Result<SandboxInfo, String> {
        let Some(read) = self.read.take() else {
            return Err("its info pipe was already read".into());
        };
        let reading = tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let mut file = std::fs::File::from(read);
            let mut text = String::new();
            let mut chunk = [0u8; 512];
            // Bounded: bubblewrap writes one small JSON object, then the end comes at its exit.
            while text.len() < 64 * 1024 {
                match file.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => text.push_str(&String::from_utf8_lossy(&chunk[..n])),
                }
                if let Ok(info) = serde_json::from_str::<SandboxInfo>(&text) {
                    return Ok(info);
                }
            }
            Err(match text.trim().is_empty() {
                true => "bubblewrap exited before it ran the agent".to_owned(),
                false => format!("bubblewrap said {:?}", one_line(&text)),
            })
        });
        match tokio::time::timeout(SANDBOX_WAIT, reading).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => Err(format!("reading its info failed: {e}")),
            Err(_) => Err(format!(
                "bubblewrap said nothing within {} ms",
                SANDBOX_WAIT.as_millis()
            )),
        }
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
