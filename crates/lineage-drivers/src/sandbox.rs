//! Per-session sandboxes (V1, V2): what keeps one hosted agent from touching another on the
//! same node.
//!
//! Every agent process runs as the node's user unless something separates them, and real agents
//! run shell commands by design (Claude Code's Bash tool, Codex's exec), so without a sandbox a
//! prompt injection in one tree can read every other session's working directory and
//! environment (its API keys, its tools secret), signal its processes and act as it.
//!
//! A sandboxed session's agent is started by bubblewrap (`bwrap`, the unprivileged sandbox
//! Flatpak uses) in new user, pid, IPC, UTS and mount namespaces ([`SandboxPlan::args`]):
//! - it sees only its own processes (a `/proc` of its own pid namespace), so it cannot list,
//!   signal or ptrace another agent, nor read another's `/proc/<pid>/environ`;
//! - its file system is the system's toolchain read only ([`SYSTEM_READ_ONLY`]: `/usr`, the
//!   libraries, a few files of `/etc`, never the node's config or data directory), what its
//!   profile grants (`sandbox_read_only`, `sandbox_read_write`), its own working directory
//!   (mode 0700) read-write, a private `/tmp`, and the node's tools socket;
//! - `no_new_privs` is set (bubblewrap always sets it), it runs in a session of its own (no
//!   terminal to inject into), and it dies with the node (`--die-with-parent`);
//! - its environment is exactly the profile's (the driver clears the node's).
//!
//! Stopping it is total: killing the sandbox's first process (pid 1 of its namespace) makes the
//! kernel kill every process in it, whatever they did to leave a process group.
//!
//! [`Confinement`] is how the node recognises a session's processes afterwards: the tools
//! socket serves a connection only when the peer (`SO_PEERCRED`) is in the sandbox of the
//! session whose secret it presents, so a secret alone is not enough.
//!
//! [`probe`] says at start whether this node can make sandboxes (bubblewrap installed, user
//! namespaces allowed); a profile with `isolation = "sandbox"` on a node that cannot refuses the
//! node's start ([`crate::profiles::AgentProfiles::resolve_isolation`]).
//!
//! | file | what |
//! |---|---|
//! | `sandbox.rs` | [`Isolation`], [`probe`], the system's paths, [`SandboxPlan`] and its bubblewrap arguments, a sandboxed agent's environment |
//! | `sandbox/confinement.rs` | [`SandboxInfo`], [`Confinement`]: which processes are a session's, read from `/proc` |
//! | `sandbox/uids.rs` | [`UidRange`], [`UidPool`], [`UidLease`]: a uid per sandbox on a node that may switch uids, and the steps around it |

mod confinement;
mod uids;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use confinement::{members, pid_namespace, Confinement, SandboxInfo};
pub use uids::{chown_tree, effective_uid, unsearchable_above, UidLease, UidPool, UidRange};

/// A profile's `isolation` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// A sandbox when the node can make one, else none, said once at the node's start.
    #[default]
    Auto,
    /// Always a sandbox; a node that cannot make one refuses to start.
    Sandbox,
    /// No sandbox: the agent runs as the node's user and can reach everything that user can
    /// (development, or one node per agent). Its tools connections are still bound to its
    /// process tree.
    None,
}

impl Isolation {
    /// The key's spelling in config.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Auto => "auto",
            Isolation::Sandbox => "sandbox",
            Isolation::None => "none",
        }
    }
}

/// Whether this node can make sandboxes: [`probe`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// It can, with this `bwrap`.
    Available {
        /// The bubblewrap program.
        bwrap: PathBuf,
        /// What of [`SYSTEM_READ_ONLY`] this machine has ([`system_view`]).
        system: Vec<SystemPath>,
    },
    /// It cannot: one line saying which capability is missing and what to do.
    Missing(String),
}

/// What the system lends every sandbox, read only, when it exists: the toolchain and the few
/// files of `/etc` programs need to run and reach the network (never all of `/etc`: a node's
/// config and NATS credentials are often there).
pub const SYSTEM_READ_ONLY: [&str; 24] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ssl",
    "/etc/pki",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/localtime",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/mime.types",
];

/// How a sandbox shows one path of [`SYSTEM_READ_ONLY`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemPath {
    /// Bound read only (a symbolic link is bound as what it points to).
    ReadOnly(PathBuf),
    /// A top-level link into `/usr` (a merged `/usr`'s `/bin`, `/lib`, ...): made as the same
    /// link, which costs no mount.
    Link {
        /// The link (`/bin`).
        path: PathBuf,
        /// Where it points (`usr/bin`).
        target: PathBuf,
    },
}

/// What of [`SYSTEM_READ_ONLY`] this machine has, and how to show each: read once at the
/// node's start, so that a sandbox is made with one mount per path that exists (each mount is
/// part of the milliseconds making a sandbox takes).
pub fn system_view() -> Vec<SystemPath> {
    SYSTEM_READ_ONLY
        .iter()
        .map(Path::new)
        .filter_map(|path| {
            let meta = std::fs::symlink_metadata(path).ok()?;
            if meta.file_type().is_symlink() && path.parent() == Some(Path::new("/")) {
                let target = std::fs::read_link(path).ok()?;
                if target.starts_with("usr") {
                    return Some(SystemPath::Link {
                        path: path.to_path_buf(),
                        target,
                    });
                }
            }
            std::fs::metadata(path)
                .is_ok()
                .then(|| SystemPath::ReadOnly(path.to_path_buf()))
        })
        .collect()
}

/// Everything one session's sandbox shows its agent besides [`SYSTEM_READ_ONLY`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    /// The bubblewrap program.
    pub bwrap: PathBuf,
    /// The session's working directory: read-write, the agent starts there.
    pub workdir: PathBuf,
    /// Granted read only (the profile's `sandbox_read_only`, the agent's program directory,
    /// the `lineage mcp` bridge).
    pub read_only: Vec<PathBuf>,
    /// Granted read-write (the profile's `sandbox_read_write`).
    pub read_write: Vec<PathBuf>,
    /// Unix sockets the agent may connect to (the node's tools socket), bound read only.
    pub sockets: Vec<PathBuf>,
    /// The uid (and gid) the sandbox runs as outside its namespaces, on a node that may switch
    /// uids and has `agents.sandbox_uids` (else the node's own).
    pub uid: Option<u32>,
    /// The system's paths as this machine has them ([`system_view`]); empty: every path of
    /// [`SYSTEM_READ_ONLY`], bound when it exists.
    pub system: Vec<SystemPath>,
}

impl SandboxPlan {
    /// bubblewrap's arguments for running `command` (program, then arguments) in this
    /// sandbox, writing the sandbox's pids and namespaces to `info_fd` once it runs. Pure.
    pub fn args(&self, info_fd: i32, command: &[String]) -> Vec<String> {
        let mut args: Vec<String> = [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
        ]
        .map(str::to_owned)
        .to_vec();
        let bind = |args: &mut Vec<String>, flag: &str, path: &Path| {
            let path = path.display().to_string();
            args.extend([flag.to_owned(), path.clone(), path]);
        };
        if self.system.is_empty() {
            for path in SYSTEM_READ_ONLY {
                bind(&mut args, "--ro-bind-try", Path::new(path));
            }
        }
        for system in &self.system {
            match system {
                SystemPath::ReadOnly(path) => bind(&mut args, "--ro-bind-try", path),
                SystemPath::Link { path, target } => args.extend([
                    "--symlink".to_owned(),
                    target.display().to_string(),
                    path.display().to_string(),
                ]),
            }
        }
        for path in &self.read_only {
            bind(&mut args, "--ro-bind-try", path);
        }
        for path in &self.read_write {
            bind(&mut args, "--bind-try", path);
        }
        for path in &self.sockets {
            bind(&mut args, "--ro-bind-try", path);
        }
        bind(&mut args, "--bind", &self.workdir);
        args.extend([
            "--chdir".to_owned(),
            self.workdir.display().to_string(),
            "--info-fd".to_owned(),
            info_fd.to_string(),
            "--".to_owned(),
        ]);
        args.extend(command.iter().cloned());
        args
    }
}

/// Whether this node can make sandboxes: `bwrap` on `path` (the node's `PATH`), and a trial
/// sandbox that runs `true` (user namespaces may be off: `kernel.unprivileged_userns_clone`,
/// AppArmor's `apparmor_restrict_unprivileged_userns`, a container's seccomp profile).
pub fn probe(path: Option<&str>) -> Support {
    let Some(bwrap) = find_program("bwrap", path) else {
        return Support::Missing(
            "bubblewrap (bwrap) is not on the node's PATH; install it (Debian/Ubuntu: apt-get install bubblewrap)".into(),
        );
    };
    let plan = SandboxPlan {
        bwrap: bwrap.clone(),
        workdir: std::env::temp_dir(),
        read_only: Vec::new(),
        read_write: Vec::new(),
        sockets: Vec::new(),
        uid: None,
        system: system_view(),
    };
    let mut args = plan.args(1, &["true".to_owned()]);
    // The trial writes its info to stdout, which is discarded.
    let out = std::process::Command::new(&bwrap)
        .args(args.drain(..))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => Support::Available {
            bwrap,
            system: plan.system,
        },
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.lines().next().unwrap_or("").trim().to_owned();
            Support::Missing(format!(
                "{} cannot create a sandbox here ({said}); allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0; in a container, a seccomp profile that allows them)",
                bwrap.display()
            ))
        }
        Err(e) => Support::Missing(format!("cannot run {}: {e}", bwrap.display())),
    }
}

/// `name` on `path` (colon-separated), when it is there.
fn find_program(name: &str, path: Option<&str>) -> Option<PathBuf> {
    path?
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(name))
        .find(|candidate| candidate.is_file())
}

/// The environment a sandboxed agent gets from `env` (its profile's): the same, except that a
/// `HOME` the profile did not set itself (the node's own, from the base environment) becomes
/// the session's working directory, since the node's home is not in the sandbox.
pub fn sandbox_env(
    mut env: BTreeMap<String, String>,
    profile_sets_home: bool,
    workdir: &Path,
) -> BTreeMap<String, String> {
    if !profile_sets_home {
        env.insert("HOME".to_owned(), workdir.display().to_string());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> SandboxPlan {
        SandboxPlan {
            bwrap: "/usr/bin/bwrap".into(),
            workdir: "/data/work/s1".into(),
            read_only: vec!["/opt/harness".into()],
            read_write: vec!["/srv/shared".into()],
            sockets: vec!["/data/tools/tools.sock".into()],
            uid: None,
            system: Vec::new(),
        }
    }

    fn after<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    }

    #[test]
    fn v2_the_sandbox_unshares_every_namespace_but_the_network_and_shows_only_what_is_granted() {
        let args = plan().args(7, &["agent".into(), "--acp".into()]);
        for flag in [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--die-with-parent",
            "--new-session",
        ] {
            assert!(args.iter().any(|a| a == flag), "{flag}: {args:?}");
        }
        // Read-write: the workdir and the profile's grant only.
        assert_eq!(after(&args, "--bind"), ["/data/work/s1"]);
        assert_eq!(after(&args, "--bind-try"), ["/srv/shared"]);
        let read_only = after(&args, "--ro-bind-try");
        assert!(read_only.contains(&"/usr") && read_only.contains(&"/opt/harness"));
        assert!(read_only.contains(&"/data/tools/tools.sock"));
        // Never all of /etc, never the data directory.
        assert!(!read_only.contains(&"/etc") && !read_only.contains(&"/data"));
        assert_eq!(after(&args, "--chdir"), ["/data/work/s1"]);
        assert_eq!(after(&args, "--info-fd"), ["7"]);
        let tail: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .skip_while(|a| *a != "--")
            .collect();
        assert_eq!(tail, ["--", "agent", "--acp"]);
    }

    #[test]
    fn v2_a_merged_usr_is_shown_with_links_and_only_existing_paths_are_bound() {
        let plan = SandboxPlan {
            system: vec![
                SystemPath::ReadOnly("/usr".into()),
                SystemPath::Link {
                    path: "/bin".into(),
                    target: "usr/bin".into(),
                },
            ],
            ..plan()
        };
        let args = plan.args(3, &["a".into()]);
        assert_eq!(after(&args, "--symlink"), ["usr/bin"]);
        let read_only = after(&args, "--ro-bind-try");
        assert!(
            read_only.contains(&"/usr") && !read_only.contains(&"/lib64"),
            "{args:?}"
        );
        // This machine: every path named exists or is a link into /usr.
        for path in system_view() {
            match path {
                SystemPath::ReadOnly(p) => assert!(p.exists(), "{}", p.display()),
                SystemPath::Link { target, .. } => assert!(target.starts_with("usr")),
            }
        }
    }

    #[test]
    fn v2_home_is_the_workdir_unless_the_profile_sets_it() {
        let env = BTreeMap::from([("HOME".to_owned(), "/root".to_owned())]);
        let work = Path::new("/data/work/s1");
        assert_eq!(
            sandbox_env(env.clone(), false, work)["HOME"],
            "/data/work/s1"
        );
        assert_eq!(sandbox_env(env, true, work)["HOME"], "/root");
    }

    #[test]
    fn v1_a_tree_confinement_holds_its_leader_and_not_a_stranger() {
        let me = std::process::id() as i32;
        assert!(Confinement::Tree { leader: me }.holds(me));
        // pid 1 is no descendant of this test process.
        assert!(!Confinement::Tree { leader: me }.holds(1));
        let info = SandboxInfo {
            child_pid: me,
            pid_namespace: pid_namespace(me).expect("own pid namespace"),
        };
        assert!(Confinement::Sandbox(info).holds(me));
        let other = SandboxInfo {
            pid_namespace: info.pid_namespace + 1,
            ..info
        };
        assert!(!Confinement::Sandbox(other).holds(me));
    }

    #[test]
    fn v2_uid_ranges_parse_and_refuse_root_and_nonsense() {
        let range = UidRange::try_from("200000-200002".to_owned()).unwrap();
        assert_eq!((range.first, range.last), (200000, 200002));
        assert_eq!(String::from(range), "200000-200002");
        for bad in ["0-10", "10-5", "abc", "5", "-5", "1-4294967295"] {
            let err = UidRange::try_from(bad.to_owned()).unwrap_err();
            assert!(err.contains("FIRST-LAST"), "{bad}: {err}");
        }
    }

    #[test]
    fn v2_a_uid_pool_gives_each_live_session_its_own_uid_and_takes_them_back() {
        let pool = UidPool::new(UidRange {
            first: 10,
            last: 11,
        });
        let a = pool.take(7).unwrap();
        let b = pool.take(7).unwrap();
        assert_ne!(a.uid, b.uid);
        assert!(pool.take(0).is_none(), "two uids, two live sessions");
        let uid = a.uid;
        drop(a);
        assert_eq!(
            pool.take(7).map(|l| l.uid),
            Some(uid),
            "the same slot again"
        );
    }

    #[test]
    fn v2_find_program_looks_only_on_the_given_path() {
        assert_eq!(find_program("sh", Some("/nonexistent")), None);
        assert_eq!(find_program("sh", None), None);
        assert!(find_program("sh", Some("/nonexistent:/bin:/usr/bin")).is_some());
    }
}
