//! Which processes are a session's (V1): what `bwrap --info-fd` says of a sandbox
//! ([`SandboxInfo`]), a session's [`Confinement`] (its pid namespace, or its agent's process
//! tree), and the `/proc` reads behind them ([`pid_namespace`], [`members`]).

use serde::Deserialize;

/// What `bwrap --info-fd` writes once the sandbox runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct SandboxInfo {
    /// The sandbox's first process (pid 1 inside), as the node sees its pid.
    #[serde(rename = "child-pid")]
    pub child_pid: i32,
    /// The sandbox's pid namespace (the inode `/proc/<pid>/ns/pid` names).
    #[serde(rename = "pid-namespace")]
    pub pid_namespace: u64,
}

/// Which processes are a session's, for binding its tools connections to it (V1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// Every process in this pid namespace (a sandboxed session).
    Sandbox(SandboxInfo),
    /// The agent `leader` and its descendants (an unsandboxed session). Not the process
    /// group: any process of the node's session could join that (`setpgid`).
    Tree {
        /// The agent's pid.
        leader: i32,
    },
}

impl Confinement {
    /// Whether process `pid` (as the node sees it) is one of the session's.
    pub fn holds(&self, pid: i32) -> bool {
        match self {
            Confinement::Sandbox(info) => pid_namespace(pid) == Some(info.pid_namespace),
            Confinement::Tree { leader } => {
                // Bounded: a process tree is not this deep, and a cycle cannot occur.
                let mut at = pid;
                for _ in 0..64 {
                    let Some(stat) = ProcStat::read(at) else {
                        return false;
                    };
                    if at == *leader {
                        return true;
                    }
                    if stat.parent <= 1 {
                        return false;
                    }
                    at = stat.parent;
                }
                false
            }
        }
    }
}

/// The pid namespace of process `pid`, when it exists and may be read.
pub fn pid_namespace(pid: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    link.to_str()?
        .strip_prefix("pid:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Every process (as the node sees its pid) in pid namespace `namespace`.
pub fn members(namespace: u64) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| pid_namespace(*pid) == Some(namespace))
        .collect()
}

/// The field of `/proc/<pid>/stat` the binding reads.
struct ProcStat {
    parent: i32,
}

impl ProcStat {
    fn read(pid: i32) -> Option<ProcStat> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is in parentheses and may hold anything; the fields follow it.
        let (_, rest) = stat.rsplit_once(')')?;
        let mut fields = rest.split_whitespace();
        let _state = fields.next()?;
        let parent = fields.next()?.parse().ok()?;
        Some(ProcStat { parent })
    }
}
