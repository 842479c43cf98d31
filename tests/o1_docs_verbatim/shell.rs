//! The processes: `lineage dev`, the bash a command runs in (its state kept from one command to
//! the next), and stopping a process group with everything it started.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lineage_testkit::{free_port, lineage_bin, poll, wait_for, workspace_root};

use crate::parse::tail;

/// The pids of every descendant of `pid` (from /proc), children before grandchildren.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces and parens.
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parent_of.push((p, ppid));
            }
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// `kill -SIG pid` (a negative pid is a process group, `-- -PGID`).
fn signal(sig: &str, pid: i64) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), "--".to_owned(), pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// An exit status as a shell reports it: the code, or 128 + the signal that ended it.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Stops `child` (the leader of its own process group): SIGINT (or `sig`) to the group, up to
/// `within` for it to exit, then SIGKILL to the group and to every descendant it left. The exit
/// code ([`exit_code`]).
pub fn stop_group(child: &mut Child, sig: &str, within: Duration) -> i32 {
    let pid = child.id();
    let left = descendants(pid);
    if let Ok(Some(status)) = child.try_wait() {
        for p in left {
            signal("KILL", p as i64);
        }
        return exit_code(status);
    }
    signal(sig, -(pid as i64));
    let status = poll(within, || child.try_wait().ok().flatten());
    signal("KILL", -(pid as i64));
    for p in left.into_iter().chain(descendants(pid)) {
        signal("KILL", p as i64);
    }
    match status {
        Ok(s) => exit_code(s),
        Err(_) => {
            let _ = child.kill();
            child.wait().map(exit_code).unwrap_or(-1)
        }
    }
}

/// `lineage dev` on a free NATS port: nats-server and 3 nodes, the demo, then up until stopped.
pub struct LineageDev {
    child: Child,
    out: PathBuf,
    pub url: String,
}

impl LineageDev {
    pub fn start(dir: &Path) -> LineageDev {
        let port = free_port().expect("a free port");
        let out = dir.join("lineage-dev.out");
        let file = std::fs::File::create(&out).expect("create the dev output file");
        let data = dir.join("dev");
        let child = Command::new(lineage_bin())
            .args(["dev", "--nats-port", &port.to_string(), "--dir"])
            .arg(&data)
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup"))
            .stderr(file)
            .process_group(0)
            .spawn()
            .expect("start lineage dev");
        let mut cluster = LineageDev {
            child,
            out,
            url: format!("nats://127.0.0.1:{port}"),
        };
        wait_for(
            Duration::from_secs(240),
            "`lineage dev` to start its cluster and run the demo (\"the cluster stays up\")",
            || {
                let text = cluster.output();
                if text.contains("the cluster stays up") {
                    return Ok(());
                }
                if let Ok(Some(status)) = cluster.child.try_wait() {
                    panic!("lineage dev exited ({status}) before its cluster was up:\n{text}");
                }
                Err(tail(&text, 3))
            },
        );
        cluster
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for LineageDev {
    fn drop(&mut self) {
        // SIGTERM: `lineage dev` stops its nodes and nats-server by pid; whatever is left after
        // 20 s is killed (the group, and each descendant by pid).
        stop_group(&mut self.child, "TERM", Duration::from_secs(20));
    }
}

/// Where a tool is: PATH, then `~/go/bin`.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join("go/bin"));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// The shell the commands run in: environment, state file, output files.
pub struct Shell {
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    pub state: PathBuf,
    pub n: usize,
}

/// Saves the variables and functions a command set, for the next one (bash's own specials
/// excepted).
const SAVE_STATE: &str = r#"__readme_save() {
  local __readme_v
  for __readme_v in $(compgen -v); do
    case $__readme_v in
      BASH*|FUNCNAME|LINENO|RANDOM|SRANDOM|SECONDS|EPOCH*|PWD|OLDPWD|SHLVL|_|PIPESTATUS|PPID|UID|EUID|GROUPS|DIRSTACK|COMP_*|HIST*|OPTARG|OPTIND|SHELLOPTS|__readme_*) continue ;;
    esac
    declare -p "$__readme_v"
  done > "$__readme_state.new" 2>/dev/null
  declare -f >> "$__readme_state.new"
  mv "$__readme_state.new" "$__readme_state"
}"#;

/// What a finished command did.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl Shell {
    /// A bash script: load the state, the command verbatim, then (`save`) keep its exit code
    /// and save the state.
    fn script(&self, text: &str, save: bool) -> String {
        let load = format!(
            "__readme_state={state:?}\n[ -f \"$__readme_state\" ] && source \"$__readme_state\" >/dev/null 2>&1\n",
            state = self.state.display().to_string()
        );
        if save {
            format!(
                "{load}{SAVE_STATE}\n{text}\n__readme_rc=$?\n__readme_save\nexit $__readme_rc\n"
            )
        } else {
            format!("{load}{text}\n")
        }
    }

    /// Starts `text` as a bash script in its own process group: (child, stdout, stderr paths).
    pub fn start(&mut self, text: &str, save: bool) -> (Child, PathBuf, PathBuf) {
        self.n += 1;
        let n = self.n;
        let script = self.dir.join(format!("cmd-{n}.sh"));
        std::fs::write(&script, self.script(text, save)).expect("write a command script");
        let out = self.dir.join(format!("cmd-{n}.out"));
        let err = self.dir.join(format!("cmd-{n}.err"));
        let mut command = Command::new("bash");
        command
            .arg(&script)
            .current_dir(workspace_root())
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("create an output file"))
            .stderr(std::fs::File::create(&err).expect("create an output file"))
            .process_group(0);
        // Ctrl-C must reach it as in a terminal, even when this test runs with SIGINT ignored
        // (a suite started in the background of a script, `cmd &`, inherits SIGINT and SIGQUIT
        // ignored, and bash cannot undo an ignore it started with).
        // SAFETY: between fork and exec only async-signal-safe calls: signal(2).
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGQUIT, libc::SIG_DFL);
                Ok(())
            });
        }
        let child = command.spawn().expect("run bash");
        (child, out, err)
    }

    /// Runs `text` to the end (60 s at most) with the state saved after it.
    pub fn run(&mut self, text: &str) -> Ran {
        let (mut child, out, err) = self.start(text, true);
        let limit = Duration::from_secs(60);
        let status = poll(limit, || child.try_wait().ok().flatten());
        let (code, timed_out) = match status {
            Ok(s) => (exit_code(s), false),
            Err(_) => (stop_group(&mut child, "KILL", Duration::from_secs(5)), true),
        };
        Ran {
            code,
            stdout: std::fs::read_to_string(out).unwrap_or_default(),
            stderr: std::fs::read_to_string(err).unwrap_or_default(),
            timed_out,
        }
    }
}
