//! The shipped `config/nats-server.conf` under test (Z1, Z2): a real nats-server started from
//! that file with only its `listen`, `server_name` and `store_dir` lines templated, passwords
//! generated per test and passed the way an operator does (environment variables), and async-nats
//! connections as each of its users that record the server's permission errors
//! ([`crate::user_conn::UserConn`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{greeting, poll};

/// The cluster the shipped file is written for.
pub const SHIPPED_CLUSTER: &str = "dev";

/// The shipped users and the environment variable holding each one's password.
pub const USERS: [(&str, &str); 4] = [
    ("voter", "LINEAGE_NATS_VOTER_PASSWORD"),
    ("node-4", "LINEAGE_NATS_NODE_4_PASSWORD"),
    ("operator", "LINEAGE_NATS_OPERATOR_PASSWORD"),
    ("observer", "LINEAGE_NATS_OBSERVER_PASSWORD"),
];

/// The repository root.
pub fn repo_root() -> PathBuf {
    crate::workspace_root()
}

/// `config/nats-server.conf`.
pub fn shipped_config_path() -> PathBuf {
    repo_root().join("config/nats-server.conf")
}

/// `config/nats/run-nats-server.sh`.
pub fn run_script_path() -> PathBuf {
    repo_root().join("config/nats/run-nats-server.sh")
}

/// The shipped file's text.
pub fn shipped_config() -> String {
    std::fs::read_to_string(shipped_config_path()).expect("read config/nats-server.conf")
}

/// The byte range of the top-level `authorization { ... }` block of a nats-server config
/// (braces in comments and quoted strings are skipped).
pub fn authorization_range(text: &str) -> std::ops::Range<usize> {
    let start = text
        .lines()
        .scan(0usize, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| line.trim_start().starts_with("authorization"))
        .map(|(at, _)| at)
        .expect("config/nats-server.conf has no top-level `authorization` block");
    let end = start + matching_close(&text[start..], '{', '}') + 1;
    start..end
}

/// The text of the top-level `authorization { ... }` block.
pub fn authorization_block(text: &str) -> &str {
    &text[authorization_range(text)]
}

/// The entries inside `users = [ ... ]` of an authorization block.
pub fn users_of(block: &str) -> &str {
    let at = block
        .find("users")
        .expect("authorization block without users");
    let open = at + block[at..].find('[').expect("users without [");
    let close = open + matching_close(&block[open..], '[', ']');
    &block[open + 1..close]
}

/// Offset (in `text`, which contains `open` first) of the bracket closing the first `open`,
/// skipping `#` comments and double-quoted strings.
fn matching_close(text: &str, open: char, close: char) -> usize {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut in_comment = false;
    for (i, c) in text.char_indices() {
        match c {
            '\n' => in_comment = false,
            _ if in_comment => {}
            '"' => in_string = !in_string,
            _ if in_string => {}
            '#' => in_comment = true,
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced {open}{close} in the nats-server config");
}

/// The shipped users rewritten for another cluster, the way the chart renders them: subjects
/// `lineage.<cluster>.`, stream names `LINEAGE_<CLUSTER>_`, user names `<cluster>-<user>` and
/// password variables `$LINEAGE_NATS_<CLUSTER>_..._PASSWORD` (so both fit in one server).
pub fn users_for_cluster(users: &str, cluster: &str) -> String {
    let token = cluster.to_ascii_uppercase().replace('-', "_");
    let mut out = users.to_owned();
    for (from, to) in [
        (
            format!("lineage.{SHIPPED_CLUSTER}."),
            format!("lineage.{cluster}."),
        ),
        (
            format!("LINEAGE_{}_", SHIPPED_CLUSTER.to_ascii_uppercase()),
            format!("LINEAGE_{token}_"),
        ),
        ("user: \"".to_owned(), format!("user: \"{cluster}-")),
        (
            "$LINEAGE_NATS_".to_owned(),
            format!("$LINEAGE_NATS_{token}_"),
        ),
    ] {
        assert!(
            out.contains(&from),
            "the shipped users have no {from:?} to rewrite for cluster {cluster}"
        );
        out = out.replace(&from, &to);
    }
    out
}

/// The password variable of a user of `cluster` made by [`users_for_cluster`].
pub fn password_var_for_cluster(var: &str, cluster: &str) -> String {
    let token = cluster.to_ascii_uppercase().replace('-', "_");
    var.replacen("LINEAGE_NATS_", &format!("LINEAGE_NATS_{token}_"), 1)
}

/// A random password that nats-server reads as a string: a letter, then hex.
pub fn generate_password() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("read /dev/urandom");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("p{hex}")
}

/// Generated passwords, one per variable, and the environment that passes them to nats-server.
#[derive(Debug, Clone)]
pub struct Passwords {
    /// (variable, password)
    pub vars: Vec<(String, String)>,
}

impl Passwords {
    /// A password for every shipped user.
    pub fn shipped() -> Passwords {
        Passwords {
            vars: USERS
                .iter()
                .map(|(_, var)| ((*var).to_owned(), generate_password()))
                .collect(),
        }
    }

    /// Adds a password for every shipped user rewritten for `cluster`.
    pub fn with_cluster(mut self, cluster: &str) -> Passwords {
        for (_, var) in USERS {
            self.vars
                .push((password_var_for_cluster(var, cluster), generate_password()));
        }
        self
    }

    /// The password in variable `var`.
    pub fn of_var(&self, var: &str) -> &str {
        &self
            .vars
            .iter()
            .find(|(v, _)| v == var)
            .unwrap_or_else(|| panic!("no password for {var}"))
            .1
    }

    /// The password of shipped user `user` (`voter`, `node-4`, `operator`, `observer`).
    pub fn of(&self, user: &str) -> &str {
        let var = USERS
            .iter()
            .find(|(u, _)| *u == user)
            .unwrap_or_else(|| panic!("{user} is not a shipped user"))
            .1;
        self.of_var(var)
    }

    /// nats-server config variables defining the passwords (`NAME: "value"`), for servers
    /// started by `crate::NatsServer`, which passes no environment of its own: the
    /// config's `$NAME` references resolve to these first.
    pub fn as_config_vars(&self) -> String {
        self.vars
            .iter()
            .map(|(var, pw)| format!("{var}: \"{pw}\"\n"))
            .collect()
    }
}

/// How [`ShippedNats::start`] templates the shipped file.
#[derive(Debug, Clone, Default)]
pub struct ShippedOptions {
    /// Replaces the shipped `authorization { ... }` block (e.g. with more clusters' users).
    pub authorization: Option<String>,
    /// Config text appended at the top level (e.g. a `tls { ... }` block).
    pub extra: String,
    /// Variables left out of nats-server's environment (the fail-closed check).
    pub unset: Vec<String>,
    /// Start through `config/nats/run-nats-server.sh` instead of nats-server directly.
    pub via_run_script: bool,
}

/// The shipped config with its `listen`, `server_name` and `store_dir` lines templated for a
/// test server; panics when one of those lines is missing (the file changed shape).
pub fn template(text: &str, port: u16, name: &str, store: &Path) -> String {
    let mut seen = [false; 3];
    let out: Vec<String> = text
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("listen:") && !line.starts_with(' ') {
                seen[0] = true;
                format!("listen: \"127.0.0.1:{port}\"")
            } else if trimmed.starts_with("server_name:") && !line.starts_with(' ') {
                seen[1] = true;
                format!("server_name: \"{name}\"")
            } else if trimmed.starts_with("store_dir:") {
                seen[2] = true;
                format!("  store_dir: {:?}", store.display().to_string())
            } else {
                line.to_owned()
            }
        })
        .collect();
    assert_eq!(
        seen, [true; 3],
        "config/nats-server.conf must have top-level listen: and server_name: lines and a store_dir: line"
    );
    out.join("\n") + "\n"
}

/// A real nats-server running the shipped config (templated), killed by pid when dropped.
pub struct ShippedNats {
    child: Child,
    port: u16,
    /// Holds the config file, the store and the server's log.
    pub dir: tempfile::TempDir,
    /// The passwords it was started with.
    pub passwords: Passwords,
}

impl ShippedNats {
    /// Starts nats-server with the shipped config and `passwords` in its environment, and waits
    /// until it greets on its port.
    pub fn start(passwords: Passwords, options: ShippedOptions) -> ShippedNats {
        let mut last = String::new();
        for _ in 0..5 {
            match Self::try_start(&passwords, &options) {
                Ok(server) => return server,
                Err(e) => last = e,
            }
        }
        panic!("nats-server with the shipped config did not start: {last}");
    }

    /// One attempt; `Err` with the server's log when it exited or did not answer.
    pub fn try_start(passwords: &Passwords, options: &ShippedOptions) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("lineage-shipped-nats-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let port = crate::free_port().map_err(|e| e.to_string())?;
        let name = format!("lineage-shipped-{}-{port}", std::process::id());
        let mut text = shipped_config();
        if let Some(auth) = &options.authorization {
            let range = authorization_range(&text);
            text.replace_range(range, auth);
        }
        let mut text = template(&text, port, &name, &dir.path().join("store"));
        text.push_str(&options.extra);
        let conf = dir.path().join("nats-server.conf");
        std::fs::write(&conf, text).map_err(|e| e.to_string())?;
        let log = dir.path().join("nats-server.log");
        let server = crate::nats_server_binary().map_err(|e| e.to_string())?;
        let mut cmd = if options.via_run_script {
            let mut c = Command::new(run_script_path());
            c.arg(&conf).env("NATS_SERVER_BIN", &server);
            c
        } else {
            let mut c = Command::new(&server);
            c.arg("-c").arg(&conf);
            c
        };
        cmd.arg("-l").arg(&log);
        for (var, pw) in &passwords.vars {
            if !options.unset.contains(var) {
                cmd.env(var, pw);
            }
        }
        for var in &options.unset {
            cmd.env_remove(var);
        }
        let stderr_path = dir.path().join("stderr.txt");
        let stderr = std::fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| e.to_string())?;
        let needle = format!("\"server_name\":\"{name}\"");
        let ready = poll(Duration::from_secs(10), || match child.try_wait() {
            Ok(Some(status)) => Some(Err(status)),
            _ => greeting(port)
                .ok()
                .filter(|info| info.starts_with("INFO ") && info.contains(&needle))
                .map(Ok),
        });
        match ready {
            Ok(Ok(_)) => {}
            Ok(Err(status)) => {
                return Err(format!(
                    "nats-server exited ({status}): {}{}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default(),
                    std::fs::read_to_string(&log).unwrap_or_default()
                ))
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("nats-server did not answer on port {port}"));
            }
        }
        Ok(ShippedNats {
            child,
            port,
            dir,
            passwords: passwords.clone(),
        })
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log so far (permission violations are logged at `[ERR]`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats-server.log")).unwrap_or_default()
    }
}

impl Drop for ShippedNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
