//! O1/O3 (issue 15, "README commands are tested verbatim"): the fenced ```sh blocks of
//! `README.md` and `charts/lineage/README.md`, parsed at test time, run in order against a
//! `lineage dev` cluster, each command checked for its exit code and one line of its output.
//!
//! How a README is read:
//! - A command is a line of a ```sh block, with the lines after it while a line ends in `\`;
//!   blank lines and comment-only lines are not commands. Its text (lines joined by `\n`, the
//!   fence's indentation removed) is its key in [`expectations`].
//! - `<!-- readme-test: skip: REASON -->` on the line before a fence skips that block (it cannot
//!   run here: docker, a real Kubernetes, a real model); an expectation [`Expect::Skip`] skips
//!   one command. The test prints every skip with its reason.
//! - Every command must have an expectation and every expectation a command: a missing or a
//!   stale one fails the test with one line naming the command.
//! - An expected line matches when it holds the expectation's parts (split at `*`) in order.
//!
//! How a command runs: its text verbatim as a bash script (`set -e` off; a `# comment` on the
//! line is bash's), cwd the workspace root, stdin `/dev/null`, in its own process group, with
//! `lineage` on PATH (the directory of `lineage_bin()` first, then `~/go/bin` for natscli and
//! helm), `NATS_URL` the cluster's, and HOME and XDG_CONFIG_HOME in a temp dir (natscli's
//! contexts land there, never in the real HOME). Shell variables and functions a command sets (`ROOT=$(...)`, `export
//! ...`) are saved after it and loaded before the next (one state file), so later commands of
//! the README see them.
//!
//! The cluster is the README's own: `lineage dev --nats-port <free> --dir <temp>`, what
//! `scripts/dev.sh` runs after its build (the test stands it in for that command and checks its
//! output); it is stopped by pid at the end (SIGTERM, then SIGKILL of it and every descendant).
//! `scripts/test.sh` is skipped (it would run this test).
//!
//! Placeholders: a `<name>` in a command is replaced before it runs by a value the test finds
//! with `lineage` in the same shell state (so `$ROOT` is the README's own), once, on first use:
//! - `<root>`: `$ROOT`, the root the "Driving a cluster" block spawned;
//! - `<child>`: the first child of `$ROOT`, from `lineage --json tree $ROOT`;
//! - `<parent>`: a live continuable root the test spawns (its first turn spawns a child that
//!   reports once); the README's `$ROOT` is drained by the time the natscli commands run;
//! - `<id>`: a session with an event log: the session `<parent>` stands for;
//! - `<drain>`: a drain id, `readme-drain`.
//!
//! A command expected to run until stopped (`nats sub`, `lineage watch`: [`Expect::Until`])
//! runs in the background while the next `after` README commands run, as in another terminal;
//! then, once its expected line shows (or 15 s passed), it gets SIGINT (Ctrl-C).
//!
//! natscli (`nats`, v0.5.0) and helm come from `~/go/bin` or PATH (`scripts/install-deps.sh`
//! installs both); when one is missing, its commands and the rest of their block are skipped,
//! with the reason printed. jq is required (the README's commands use it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lineage_testkit::{free_port, lineage_bin, poll, wait_for, workspace_root};

/// What a README command must do here.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Exits with this code, and a line of its stdout or stderr matches `line` (see [`matching_line`]).
    Exits(i32, &'static str),
    /// Runs until stopped: started in the background; the test waits until a line matches
    /// `ready` (empty: a 2 s pause), runs the next `after` README commands, waits (15 s at
    /// most) for a line matching `line`, then sends SIGINT (Ctrl-C) to its process group; it
    /// must exit with `code` (as a shell reports it: 130 when the SIGINT ended it; `lineage
    /// watch` catches it and exits 0).
    Until {
        ready: &'static str,
        after: usize,
        line: &'static str,
        code: i32,
    },
    /// Exits 0 and sets the shell variable `var` to a value matching `value` (an assignment
    /// such as `ROOT=$(...)` prints nothing; what it sets is its output).
    Sets {
        var: &'static str,
        value: &'static str,
    },
    /// Exits 0 and writes the file `path`, a line of which matches `line` (its output goes
    /// there).
    Writes {
        path: &'static str,
        line: &'static str,
    },
    /// Not run, for this reason (printed).
    Skip(&'static str),
    /// `scripts/dev.sh`: the test's own `lineage dev` stands for it (same binary, same
    /// command after the build); a line of its output must match.
    DevCluster(&'static str),
}

use Expect::{DevCluster, Exits, Sets, Skip, Until, Writes};

/// Every README command's expectation, keyed by its exact text.
fn expectations() -> Vec<(&'static str, Expect)> {
    vec![
        // README.md, "Two commands".
        (
            r#"scripts/dev.sh"#,
            DevCluster("cluster dev up: NATS nats://127.0.0.1:"),
        ),
        (
            r#"scripts/test.sh"#,
            Skip("runs every test, this one included (it would recurse); CI runs it"),
        ),
        // README.md, "Driving a cluster": the watch sees the child's interrupted turn end.
        (
            r#"lineage status                                   # leader, voters, nodes and leases, sessions by state"#,
            Exits(0, "leader*term*applied"),
        ),
        (
            r#"ROOT=$(lineage --json spawn --node node-1 --prompt go \
  --script '{"turns":[[{"do":"spawn","shape":"continuable","node":"node-2","prompt":"work","agent":{"driver":"script","script":{"turns":[[{"do":"reply","content":"ready"}],[{"do":"sleep","ms":60000},{"do":"reply","content":"slept"}]]}}}]],"after":{"do":"echo"}}' \
  | jq -r .session)"#,
            Sets {
                var: "ROOT",
                value: "*-*-*-*-*",
            },
        ),
        (
            r#"lineage tree $ROOT                               # session, shape, state, depth, node@epoch, owner, label, age"#,
            Exits(0, "continuable*depth=1*node=node-2@1"),
        ),
        (
            r#"lineage ls --root $ROOT --node node-2            # search: --root --parent --state --node --label --older-than, paged"#,
            Exits(0, "continuable*depth=1*node=node-2"),
        ),
        // Issue 37: reading what an agent said.
        (
            r#"lineage show <child>                             # one session: in a turn or idle, turns, last reply and reports"#,
            Exits(0, "reply*ready"),
        ),
        (
            r#"lineage logs $ROOT                               # its transcript from the event log; -f follows it until it is disposed"#,
            Exits(0, "spawned*(continuable) on node-2"),
        ),
        (
            r#"lineage spawn --prompt hi --wait --script '{"turns":[[{"do":"reply","content":"hello"}]]}'   # the first turn's reply; exit 1 if it did not complete"#,
            Exits(0, "hello"),
        ),
        // README.md, "Files travel with the session" (issue 39).
        (
            r#"rm -rf /tmp/lineage-files /tmp/lineage-copy && mkdir /tmp/lineage-files && echo hello | tee /tmp/lineage-files/a.txt"#,
            Exits(0, "hello"),
        ),
        (
            r#"W=$(lineage --json spawn --node node-1 --profile delegator --workspace /tmp/lineage-files | jq -r .session)"#,
            Sets {
                var: "W",
                value: "*-*-*-*-*",
            },
        ),
        (
            r#"C=$(lineage --json spawn --parent $W --shape one-shot --node node-2 --profile delegator --prompt 'sh: echo changed > a.txt' | jq -r .session)"#,
            Sets {
                var: "C",
                value: "*-*-*-*-*",
            },
        ),
        (
            r#"lineage workspace diff $C                        # its changes as a unified diff: -hello +changed"#,
            Exits(0, "+changed"),
        ),
        (
            r#"lineage workspace diff $C > /tmp/lineage-c.patch && (cd /tmp/lineage-files && git apply --check --stat /tmp/lineage-c.patch)  # a patch git applies"#,
            Exits(0, "1 file changed, 1 insertion"),
        ),
        (
            r#"lineage workspace apply $C --into /tmp/lineage-files   # all of them, or none and the conflicts (exit 4)"#,
            Exits(0, "applied*1 path(s) changed"),
        ),
        (
            r#"lineage workspace pull $W --into /tmp/lineage-copy     # a session's latest files into an empty directory"#,
            Exits(0, "pulled*/tmp/lineage-copy"),
        ),
        (
            r#"lineage watch $ROOT                              # its children: starts, reports, settlements so far, then live"#,
            Until {
                ready: "watching lineage.dev.parent.",
                after: 3,
                line: "subagent/end*interrupted",
                code: 0,
            },
        ),
        (
            r#"lineage send <child> 'next step'                 # followup; cold-resumes a cold child"#,
            Exits(0, "delivered the message"),
        ),
        (
            r#"lineage interrupt <child> --as-user $ROOT        # cancels its turn (this child's second one sleeps a minute); or --as-ancestor <session>"#,
            Exits(0, "cancelled the running turn of * on node-2"),
        ),
        (
            r#"lineage drain $ROOT                              # admission closed, leaves first, across nodes;"#,
            Exits(0, "drained 2 sessions"),
        ),
        (
            r#"lineage config show --config config/lineage.toml # effective config with each value's source"#,
            Exits(0, "nats_url*NATS_URL environment variable"),
        ),
        (
            r#"cargo build --release -p lineage -p lineage-lab -p lineage-acp-testagent && target/release/lineage bench all   # see benches/README.md"#,
            Skip("a release build takes minutes; bench_smoke runs the benches on the debug build"),
        ),
        (
            r#"target/release/lineage bench scale               # the registry at 1M sessions (~4 min, ~7 GB RAM)"#,
            Skip("needs a release build, ~7 GB of RAM and ~4 minutes"),
        ),
        (
            r#"lineage chaos --seed 12 --duration 30m           # its own cluster under every fault kind, checked"#,
            Skip("runs 30 minutes; x1_lineage_chaos and g1_chaos_registry run it for 75 s and 40 s"),
        ),
        (
            r#"lineage script check '{"turns":[[{"do":"reply","content":"hi"}]]}'   # script ok: 1 turn(s), 1 step(s)"#,
            Exits(0, "script ok: 1 turn(s), 1 step(s)"),
        ),
        // README.md, "Agent profiles".
        (
            r#"lineage agents                                   # each node's profiles (names and drivers only)"#,
            Exits(0, "acp-testagent*acp"),
        ),
        (
            r#"lineage spawn --profile acp-testagent --node node-2 --prompt hello"#,
            Exits(0, "spawned * on node-2"),
        ),
        // README.md, "Securing NATS": the passwords the natscli contexts below use.
        (
            r#"export LINEAGE_NATS_VOTER_PASSWORD="p$(openssl rand -hex 24)" \
       LINEAGE_NATS_NODE_4_PASSWORD="p$(openssl rand -hex 24)" \
       LINEAGE_NATS_OPERATOR_PASSWORD="p$(openssl rand -hex 24)" \
       LINEAGE_NATS_OBSERVER_PASSWORD="p$(openssl rand -hex 24)""#,
            Sets {
                var: "LINEAGE_NATS_OPERATOR_PASSWORD",
                value: "p*",
            },
        ),
        (
            r#"config/nats/run-nats-server.sh config/nats-server.conf     # then: exec nats-server -c FILE"#,
            Skip("starts a second nats-server from config/nats-server.conf on its fixed port 4222 and store; z2_permissions and o3_natscli test that file"),
        ),
        // README.md, "Inspecting a cluster with the `nats` CLI"; against `lineage dev` (no
        // authorization) any user gets in. natscli's `sub` dies of the SIGINT (130).
        (
            r#"nats context save lineage-operator --server "$NATS_URL" --user operator --password "$LINEAGE_NATS_OPERATOR_PASSWORD""#,
            Exits(0, "Username: operator"),
        ),
        (
            r#"nats context save lineage-observer --server "$NATS_URL" --user observer --password "$LINEAGE_NATS_OBSERVER_PASSWORD""#,
            Exits(0, "Username: observer"),
        ),
        (
            r#"lineage --context lineage-operator status"#,
            Exits(0, "leader*term*applied"),
        ),
        (
            r#"nats --context lineage-observer sub 'lineage.dev.parent.<parent>.>'"#,
            Until {
                ready: "Subscribing on",
                after: 4,
                line: "\"event\":\"subagent/start\"",
                code: 130,
            },
        ),
        (
            r#"lineage --context lineage-operator --json watch <parent> --count 8   # the same, from lineage"#,
            Until {
                ready: "",
                after: 3,
                line: "\"kind\":\"subagent-settled\"",
                code: 0,
            },
        ),
        (
            r#"nats --context lineage-operator req lineage.dev.ctl.spawn \
  '{"parent":"<parent>","shape":"continuable","prompt":"work","agent":{"driver":"script","script":{"turns":[[{"do":"report","content":"half way","delivery":"quiet"},{"do":"reply","content":"child done"}]],"after":{"do":"echo"}}}}'"#,
            Exits(0, "{\"v\":1,\"result\":{\"session\":"),
        ),
        (
            r#"nats --context lineage-operator req lineage.dev.ctl.spawn 'not json'   # one line: {"v":1,"error":{"code":"bad_request","message":"malformed spawn request: ..."}}; on stderr the headers Nats-Service-Error-Code: 400 and Nats-Service-Error: <the message>"#,
            Exits(0, "{\"v\":1,\"error\":{\"code\":\"bad_request\",\"message\":\"malformed spawn request: "),
        ),
        (
            r#"nats --context lineage-observer req lineage.dev.ctl.status '{}'        # one node's live sessions (not the cluster's: that is `lineage status`); read-only ops are the observer's"#,
            Exits(0, "{\"v\":1,\"result\":{\"node\":\"node-*\"live\":["),
        ),
        (
            r#"nats --context lineage-observer micro ls"#,
            Exits(0, "lineage control, cluster dev, node node-3"),
        ),
        (
            r#"nats --context lineage-observer micro info lineage    # endpoints: lineage.dev.ctl.<op>, lineage.dev.node.<node>.<op>"#,
            Exits(0, "Subject: lineage.dev.ctl.spawn"),
        ),
        (
            r#"nats --context lineage-observer micro stats lineage   # requests and errors per endpoint, per instance"#,
            Exits(0, "ctl-spawn"),
        ),
        (
            r#"nats --context lineage-observer micro info lineage-registry"#,
            Exits(0, "Subject: lineage.dev.registry.read"),
        ),
        (
            r#"nats --context lineage-observer req lineage.dev.registry.read '{"consistency":"stale","query":{"query":"session_counts"}}'"#,
            Exits(0, "\"result\":\"counts\",\"value\":{\"disposed\":"),
        ),
        (
            r#"nats --context lineage-observer stream get LINEAGE_DEV_INBOX --last-for 'lineage.dev.parent.<parent>.inbox'"#,
            Exits(0, "\"kind\":\"subagent-settled\""),
        ),
        (
            r#"nats --context lineage-observer stream get LINEAGE_DEV_INBOX 1"#,
            Exits(0, "Item: LINEAGE_DEV_INBOX#1 "),
        ),
        (
            r#"nats --context lineage-observer stream get LINEAGE_DEV_EVENTS --last-for 'lineage.dev.session.<id>.events'"#,
            Exits(0, "{\"v\":1,\"events\":[{\"seq\":"),
        ),
        (
            r#"nats --context lineage-observer stream info LINEAGE_DEV_EVENTS"#,
            Exits(0, "Subjects: lineage.dev.session.*.events"),
        ),
        (
            r#"nats --context lineage-observer consumer info LINEAGE_DEV_INBOX inbox-<parent>   # "lineage inbox of session <parent> (cluster dev)""#,
            Exits(0, "lineage inbox of session * (cluster dev)"),
        ),
        (
            r#"nats --context lineage-operator sub 'lineage.dev.parent.<parent>.inbox' --stream LINEAGE_DEV_INBOX --all --count 4"#,
            Exits(0, "[#4] Received JetStream message: stream: LINEAGE_DEV_INBOX"),
        ),
        (
            r#"nats --context lineage-operator stream view LINEAGE_DEV_INBOX      # needs a terminal (it pages)"#,
            Exits(1, "interactive stream paging requires a valid terminal"),
        ),
        (
            r#"nats --context lineage-observer sub 'lineage.dev.drain.<drain>.progress'"#,
            Until {
                ready: "Subscribing on",
                after: 1,
                line: "\"phase\":\"wave_done\"",
                code: 130,
            },
        ),
        (
            r#"nats --context lineage-operator req lineage.dev.ctl.drain '{"roots":["<parent>"],"progress":"<drain>"}'"#,
            Exits(0, "\"closed_count\":3"),
        ),
        // charts/lineage/README.md: the rendered lineage.toml, loaded as voter 0 would.
        (
            r#"helm template lineage charts/lineage --show-only templates/configmap.yaml \
  | awk '/^  lineage.toml: \|/ { on = 1; next } on { sub(/^    /, ""); print }' > /tmp/lineage.toml"#,
            Writes {
                path: "/tmp/lineage.toml",
                line: "[registry]",
            },
        ),
        (
            r#"LINEAGE_NODE__ID=lineage-voter-0 LINEAGE_REGISTRY__RAFT_ID=1 LINEAGE_REGISTRY__BOOTSTRAP=true \
  lineage config show --config /tmp/lineage.toml"#,
            Exits(0, "node.id*\"lineage-voter-0\"*`LINEAGE_` environment variable"),
        ),
    ]
}

/// A README whose ```sh blocks run, relative to the workspace root.
const READMES: [&str; 2] = ["README.md", "charts/lineage/README.md"];

/// The annotation that skips the block after it.
const SKIP_ANNOTATION: &str = "<!-- readme-test: skip:";

/// One command of a README.
#[derive(Debug, Clone)]
struct ReadmeCommand {
    /// `README.md:LINE`.
    at: String,
    /// Its exact text (lines joined by `\n`).
    text: String,
    /// The block's skip annotation, if any.
    block_skip: Option<String>,
    /// Which block of the file (commands of one block share a number).
    block: usize,
}

/// The commands of the ```sh blocks of `text` (the README `file`), in order.
fn parse_readme(file: &str, text: &str) -> Vec<ReadmeCommand> {
    let lines: Vec<&str> = text.lines().collect();
    let mut commands = Vec::new();
    let mut block = 0;
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let indent = lines[i].len() - trimmed.len();
        if trimmed.trim_end() != "```sh" {
            i += 1;
            continue;
        }
        block += 1;
        let block_skip = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.trim().strip_prefix(SKIP_ANNOTATION))
            .map(|rest| rest.trim_end_matches("-->").trim().to_owned());
        i += 1;
        let mut current: Option<(usize, Vec<String>)> = None;
        while i < lines.len() && lines[i].trim() != "```" {
            let line = lines[i].get(indent.min(lines[i].len() - lines[i].trim_start().len())..);
            let line = line.unwrap_or("").trim_end().to_owned();
            i += 1;
            match current.as_mut() {
                Some((_, parts)) => parts.push(line),
                None if line.trim().is_empty() || line.trim_start().starts_with('#') => continue,
                None => current = Some((i, vec![line])),
            }
            let continues = current
                .as_ref()
                .is_some_and(|(_, parts)| parts.last().is_some_and(|l| l.ends_with('\\')));
            if !continues {
                if let Some((at, parts)) = current.take() {
                    commands.push(ReadmeCommand {
                        at: format!("{file}:{at}"),
                        text: parts.join("\n"),
                        block_skip: block_skip.clone(),
                        block,
                    });
                }
            }
        }
        assert!(
            current.is_none(),
            "{file}: a ```sh block ends inside a command continued with `\\`"
        );
        i += 1;
    }
    commands
}

/// The line of `stdout`/`stderr` that matches `pattern`: it holds the pattern's parts (split at
/// `*`) in that order (so `leader*term` is "leader", then later "term").
fn matching_line<'a>(pattern: &str, stdout: &'a str, stderr: &'a str) -> Option<&'a str> {
    stdout
        .lines()
        .chain(stderr.lines())
        .find(|line| glob_in(pattern, line))
}

/// Whether `line` holds the parts of `pattern` (split at `*`) in order.
fn glob_in(pattern: &str, line: &str) -> bool {
    let mut rest = line;
    for part in pattern.split('*') {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// The last `n` lines of `text`, for a failure message.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

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
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Stops `child` (the leader of its own process group): SIGINT (or `sig`) to the group, up to
/// `within` for it to exit, then SIGKILL to the group and to every descendant it left. The exit
/// code ([`exit_code`]).
fn stop_group(child: &mut Child, sig: &str, within: Duration) -> i32 {
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
struct LineageDev {
    child: Child,
    out: PathBuf,
    url: String,
}

impl LineageDev {
    fn start(dir: &Path) -> LineageDev {
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

    fn output(&self) -> String {
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
fn find_tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join("go/bin"));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// The shell the commands run in: environment, state file, output files.
struct Shell {
    dir: PathBuf,
    env: Vec<(String, String)>,
    state: PathBuf,
    n: usize,
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
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    timed_out: bool,
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
    fn start(&mut self, text: &str, save: bool) -> (Child, PathBuf, PathBuf) {
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
    fn run(&mut self, text: &str) -> Ran {
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

/// A command running in the background ([`Expect::Until`]).
struct Background {
    cmd: ReadmeCommand,
    child: Child,
    out: PathBuf,
    err: PathBuf,
    left: usize,
    line: &'static str,
    code: i32,
}

impl Background {
    fn output(&self) -> (String, String) {
        (
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default(),
        )
    }

    /// Waits (15 s at most) for its line, stops it with SIGINT; a failure message, if any.
    fn finish(mut self) -> Result<String, String> {
        let _ = poll(Duration::from_secs(15), || {
            let (o, e) = self.output();
            matching_line(self.line, &o, &e).is_some()
        });
        let code = stop_group(&mut self.child, "INT", Duration::from_secs(10));
        let (o, e) = self.output();
        check(&self.cmd, self.code, self.line, code, &o, &e, false)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        stop_group(&mut self.child, "KILL", Duration::from_secs(1));
    }
}

/// Checks a command's outcome against its expectation: Ok(the matching line) or the failure.
fn check(
    cmd: &ReadmeCommand,
    want_code: i32,
    line: &str,
    code: i32,
    stdout: &str,
    stderr: &str,
    timed_out: bool,
) -> Result<String, String> {
    let matched = matching_line(line, stdout, stderr);
    if !timed_out && code == want_code {
        if let Some(m) = matched {
            return Ok(m.to_owned());
        }
    }
    let what = if timed_out {
        "did not finish within 60 s".to_owned()
    } else if code != want_code {
        format!("exited {code}, expected {want_code}")
    } else {
        format!("printed no line matching {line:?}")
    };
    Err(format!(
        "{at}: `{text}` {what}\n  stdout: {out}\n  stderr: {err}",
        at = cmd.at,
        text = cmd.text,
        out = tail(stdout, 8).replace('\n', "\n          "),
        err = tail(stderr, 8).replace('\n', "\n          "),
    ))
}

/// The code of one line of a command, without its `# comment` (a `#` starting a word outside
/// quotes, as bash reads it).
fn code_of(line: &str) -> &str {
    let (mut single, mut double, mut escaped) = (false, false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

/// The placeholders a command names (`<word>` or `<word-word>`) outside its comments, in order.
fn placeholders(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        found.extend(placeholders_in(code_of(line)));
    }
    found
}

/// The placeholders of `code`.
fn placeholders_in(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect();
        if !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && rest[name.len()..].starts_with('>')
        {
            found.push(name);
        }
    }
    found
}

/// `text` with each placeholder outside its comments replaced by its value.
fn substitute(text: &str, values: &HashMap<String, String>) -> String {
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let code = code_of(line);
            let mut new = code.to_owned();
            for (name, value) in values {
                new = new.replace(&format!("<{name}>"), value);
            }
            new + &line[code.len()..]
        })
        .collect();
    lines.join("\n")
}

/// Finds the value of placeholder `name` (once; `<id>` is `<parent>`'s value).
fn resolve(
    shell: &mut Shell,
    values: &mut HashMap<String, String>,
    name: &str,
) -> Result<(), String> {
    if values.contains_key(name) {
        return Ok(());
    }
    let source_name = if name == "id" { "parent" } else { name };
    if let Some(v) = values.get(source_name).cloned() {
        values.insert(name.to_owned(), v);
        return Ok(());
    }
    let Some(source) = placeholder_source(source_name) else {
        return Err(format!(
            "names <{name}>, which the test cannot fill: add it to placeholder_source()"
        ));
    };
    let got = shell.run(source);
    let value = got.stdout.trim().to_owned();
    if got.code != 0 || value.is_empty() || value == "null" || value.contains(char::is_whitespace) {
        return Err(format!(
            "cannot fill <{name}>: `{source}` exited {} with {value:?}: {}",
            got.code,
            tail(&got.stderr, 3)
        ));
    }
    eprintln!("readme: <{name}> = {value}");
    values.insert(source_name.to_owned(), value.clone());
    values.insert(name.to_owned(), value);
    Ok(())
}

/// The bash (run in the commands' state) that prints a placeholder's value.
fn placeholder_source(name: &str) -> Option<&'static str> {
    Some(match name {
        "root" => r#"printf '%s' "$ROOT""#,
        "child" => {
            r#"lineage --json tree "$ROOT" | jq -r --arg r "$ROOT" '[.[] | select(.parent == $r)][0].session'"#
        }
        "parent" => {
            r#"lineage --json spawn --shape continuable --prompt parent --script '{"turns":[[{"do":"spawn","shape":"continuable","prompt":"part","agent":{"driver":"script","script":{"turns":[[{"do":"report","content":"part started","delivery":"quiet"},{"do":"reply","text":"part done"}]],"after":{"do":"echo"}}}}]],"after":{"do":"echo"}}' | jq -r .session"#
        }
        "drain" => "printf readme-drain",
        _ => return None,
    })
}

/// The tools a command needs that may be missing here, by the words it runs.
fn optional_tool(text: &str) -> Option<&'static str> {
    let first = text
        .split_whitespace()
        .find(|w| !w.contains('='))
        .unwrap_or("");
    match first {
        "nats" => Some("nats"),
        "helm" => Some("helm"),
        _ => None,
    }
}

#[test]
fn o1_readme_commands_run_verbatim_against_lineage_dev() {
    let root = workspace_root();
    let mut commands = Vec::new();
    for file in READMES {
        let text =
            std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("read {file}: {e}"));
        commands.extend(parse_readme(file, &text));
    }
    assert!(!commands.is_empty(), "no ```sh command in {READMES:?}");

    // Expectations and commands stay in step, before anything runs.
    let table = expectations();
    let mut expect: HashMap<&str, Expect> = HashMap::new();
    let mut problems = Vec::new();
    for (text, e) in &table {
        if expect.insert(text, *e).is_some() {
            problems.push(format!("two expectations for `{text}`"));
        }
    }
    let mut in_readme = HashSet::new();
    for c in &commands {
        in_readme.insert(c.text.as_str());
        let has = expect.contains_key(c.text.as_str());
        match (&c.block_skip, has) {
            (None, false) => problems.push(format!(
                "{}: `{}` has no expectation: add one to expectations() in tests/o1_readme_verbatim.rs (exit code and a line of its output, or Skip with the reason)",
                c.at, c.text
            )),
            (Some(reason), true) => problems.push(format!(
                "{}: `{}` is in a block the README skips ({reason}); remove its expectation",
                c.at, c.text
            )),
            _ => {}
        }
    }
    for (text, _) in &table {
        if !in_readme.contains(text) {
            problems.push(format!(
                "expectation for `{text}`, which is no longer a command of {READMES:?}: remove it or fix its text"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    let jq = find_tool("jq");
    assert!(
        jq.is_some(),
        "jq is missing: the README's commands use it (apt-get install jq; scripts/install-deps.sh tries)"
    );
    let tools: BTreeMap<&str, Option<PathBuf>> =
        [("nats", find_tool("nats")), ("helm", find_tool("helm"))]
            .into_iter()
            .collect();
    for (name, path) in &tools {
        match path {
            Some(p) => eprintln!("readme: {name} is {}", p.display()),
            None => eprintln!("readme: {name} is not installed: its commands are skipped (scripts/install-deps.sh installs it)"),
        }
    }

    // `lineage dev` offers the README's `acp-testagent` profile only when the test agent is
    // built next to it.
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    assert!(
        agent.is_file(),
        "{} is missing (the README spawns --profile acp-testagent): cargo build --workspace --bins",
        agent.display()
    );
    let temp = tempfile::Builder::new()
        .prefix("o1-readme-")
        .tempdir()
        .expect("a temp dir");
    let home = temp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let cluster = LineageDev::start(temp.path());
    eprintln!("readme: lineage dev is up at {}", cluster.url);

    // PATH: the lineage under test first, then the tools found, then the test's own PATH.
    let mut path_dirs: Vec<PathBuf> = vec![lineage_bin()
        .parent()
        .expect("the binary's directory")
        .to_path_buf()];
    path_dirs.extend(
        tools
            .values()
            .flatten()
            .filter_map(|p| p.parent().map(Path::to_path_buf)),
    );
    path_dirs.extend(
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    let path = std::env::join_paths(path_dirs)
        .expect("a PATH")
        .into_string()
        .expect("a UTF-8 PATH");
    let mut env = vec![
        ("PATH".to_owned(), path),
        ("HOME".to_owned(), home.display().to_string()),
        // natscli finds its contexts here, not under $HOME (lineage reads the same).
        (
            "XDG_CONFIG_HOME".to_owned(),
            home.join(".config").display().to_string(),
        ),
        ("NATS_URL".to_owned(), cluster.url.clone()),
        ("TMPDIR".to_owned(), temp.path().display().to_string()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ];
    if let Ok(filter) = std::env::var("RUST_LOG") {
        env.push(("RUST_LOG".to_owned(), filter));
    }
    let mut shell = Shell {
        dir: temp.path().to_path_buf(),
        env,
        state: temp.path().join("state.sh"),
        n: 0,
    };

    let mut values: HashMap<String, String> = HashMap::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut background: Vec<Background> = Vec::new();
    let mut ran = 0;
    let mut skip_block: Option<(String, usize, String)> = None;
    for cmd in &commands {
        let file = cmd.at.split(':').next().unwrap_or("").to_owned();
        let e = expect.get(cmd.text.as_str()).copied();
        let reason = if let Some(r) = &cmd.block_skip {
            Some(format!("the README: {r}"))
        } else if let Some(Skip(r)) = e {
            Some(r.to_owned())
        } else if let Some(tool) = optional_tool(&cmd.text).filter(|t| tools[t].is_none()) {
            let r = format!("{tool} is not installed (scripts/install-deps.sh installs it)");
            skip_block = Some((file, cmd.block, format!("{}: {r}", cmd.at)));
            Some(r)
        } else {
            skip_block
                .as_ref()
                .filter(|(f, b, _)| *f == file && *b == cmd.block)
                .map(|(_, _, why)| format!("it builds on a skipped command ({why})"))
        };
        if let Some(reason) = reason {
            eprintln!(
                "readme: SKIP {}: `{}`: {reason}",
                cmd.at,
                first_line(&cmd.text)
            );
            skipped.push(format!("{}: `{}`: {reason}", cmd.at, first_line(&cmd.text)));
            tick(&mut background, &mut failures);
            continue;
        }
        let Some(e) = e else {
            unreachable!("checked above")
        };
        if let DevCluster(line) = e {
            let out = cluster.output();
            match matching_line(line, &out, "") {
                Some(m) => eprintln!(
                    "readme: ok   {}: `{}` (run as `lineage dev` by this test): {m}",
                    cmd.at, cmd.text
                ),
                None => failures.push(format!(
                    "{}: `{}` (`lineage dev`) printed no line matching {line:?}:\n{}",
                    cmd.at,
                    cmd.text,
                    tail(&out, 8)
                )),
            }
            ran += 1;
            tick(&mut background, &mut failures);
            continue;
        }

        // Placeholders, from values found once.
        let mut unresolved = None;
        for name in placeholders(&cmd.text) {
            if let Err(why) = resolve(&mut shell, &mut values, &name) {
                unresolved = Some(format!("{}: `{}`: {why}", cmd.at, cmd.text));
                break;
            }
        }
        if let Some(u) = unresolved {
            eprintln!("readme: FAIL {u}");
            failures.push(u);
            tick(&mut background, &mut failures);
            continue;
        }
        let text = substitute(&cmd.text, &values);

        ran += 1;
        match e {
            Exits(code, line) => {
                let got = shell.run(&text);
                let outcome = check(
                    cmd,
                    code,
                    line,
                    got.code,
                    &got.stdout,
                    &got.stderr,
                    got.timed_out,
                );
                report(
                    cmd,
                    outcome.map(|m| format!("exit {code}, {m:?}")),
                    &mut failures,
                );
                tick(&mut background, &mut failures);
            }
            Until {
                ready,
                after,
                line,
                code,
            } => {
                tick(&mut background, &mut failures);
                let (child, out, err) = shell.start(&text, false);
                let b = Background {
                    cmd: cmd.clone(),
                    child,
                    out,
                    err,
                    left: after,
                    line,
                    code,
                };
                if ready.is_empty() {
                    std::thread::sleep(Duration::from_secs(2));
                } else {
                    let started = Instant::now();
                    let seen = poll(Duration::from_secs(15), || {
                        let (o, e) = b.output();
                        matching_line(ready, &o, &e).is_some()
                    });
                    if seen.is_err() {
                        let (o, e) = b.output();
                        let f = format!("{}: `{}` showed no line matching {ready:?} within {:?}\n  stdout: {}\n  stderr: {}", cmd.at, cmd.text, started.elapsed(), tail(&o, 5), tail(&e, 5));
                        eprintln!("readme: FAIL {f}");
                        failures.push(f);
                        continue; // dropped: stopped by its process group
                    }
                }
                eprintln!(
                    "readme: bg   {}: `{}` runs while the next {after} commands run",
                    cmd.at,
                    first_line(&cmd.text)
                );
                background.push(b);
            }
            Sets { var, value } => {
                let got = shell.run(&text);
                let set = shell.run(&format!("printf '%s' \"${{{var}}}\""));
                let outcome = if got.code != 0 || got.timed_out {
                    check(
                        cmd,
                        0,
                        "",
                        got.code,
                        &got.stdout,
                        &got.stderr,
                        got.timed_out,
                    )
                } else {
                    check(cmd, 0, value, 0, &set.stdout, "", false).map_err(|_| {
                        format!(
                            "{}: `{}` set ${var} to {:?}, which does not match {value:?}\n  stderr: {}",
                            cmd.at,
                            cmd.text,
                            set.stdout,
                            tail(&got.stderr, 8)
                        )
                    })
                };
                report(
                    cmd,
                    outcome.map(|v| format!("exit 0, ${var}={v}")),
                    &mut failures,
                );
                tick(&mut background, &mut failures);
            }
            Writes { path, line } => {
                let got = shell.run(&text);
                let written = std::fs::read_to_string(path).unwrap_or_default();
                let outcome = if got.code != 0 || got.timed_out {
                    check(
                        cmd,
                        0,
                        line,
                        got.code,
                        &got.stdout,
                        &got.stderr,
                        got.timed_out,
                    )
                } else {
                    check(cmd, 0, line, 0, &written, "", false).map_err(|_| {
                        format!(
                            "{}: `{}` wrote no line matching {line:?} to {path}:\n{}\n  stderr: {}",
                            cmd.at,
                            cmd.text,
                            tail(&written, 8),
                            tail(&got.stderr, 8)
                        )
                    })
                };
                report(
                    cmd,
                    outcome.map(|m| format!("exit 0, {path}: {m:?}")),
                    &mut failures,
                );
                tick(&mut background, &mut failures);
            }
            Skip(_) | DevCluster(_) => unreachable!("handled above"),
        }
    }
    for b in background.drain(..) {
        finish_background(b, &mut failures);
    }
    drop(cluster);

    eprintln!("readme: {ran} commands run, {} skipped:", skipped.len());
    for s in &skipped {
        eprintln!("  {s}");
    }
    assert!(
        failures.is_empty(),
        "{} README command(s) did not do what the README says:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Prints a command's outcome; a failure is kept for the end.
fn report(cmd: &ReadmeCommand, outcome: Result<String, String>, failures: &mut Vec<String>) {
    match outcome {
        Ok(what) => eprintln!(
            "readme: ok   {}: `{}`: {what}",
            cmd.at,
            first_line(&cmd.text)
        ),
        Err(f) => {
            eprintln!("readme: FAIL {f}");
            failures.push(f);
        }
    }
}

/// The first line of a command, for a one-line report.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// One README command has gone by: background commands whose `after` is used up are stopped
/// and checked.
fn tick(background: &mut Vec<Background>, failures: &mut Vec<String>) {
    for b in background.iter_mut() {
        b.left = b.left.saturating_sub(1);
    }
    let (done, running): (Vec<_>, Vec<_>) = std::mem::take(background)
        .into_iter()
        .partition(|b| b.left == 0);
    *background = running;
    for b in done {
        finish_background(b, failures);
    }
}

fn finish_background(b: Background, failures: &mut Vec<String>) {
    let at = format!("{}: `{}`", b.cmd.at, first_line(&b.cmd.text));
    match b.finish() {
        Ok(m) => eprintln!("readme: ok   {at} (stopped): {m:?}"),
        Err(f) => {
            eprintln!("readme: FAIL {f}");
            failures.push(f);
        }
    }
}

#[test]
fn o1_the_parser_reads_blocks_continuations_annotations_and_placeholders() {
    let text = "intro\n\n```sh\nlineage status   # leader\nX=$(a \\\n  b)\n# a comment\n\necho $X\n```\n\n<!-- readme-test: skip: needs docker -->\n```sh\ndocker build .\n```\n\n1. item\n\n   ```sh\n   helm template x \\\n     | awk 1\n   ```\n```json\n{}\n```\n";
    let cmds = parse_readme("R.md", text);
    let texts: Vec<&str> = cmds.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "lineage status   # leader",
            "X=$(a \\\n  b)",
            "echo $X",
            "docker build .",
            "helm template x \\\n  | awk 1"
        ]
    );
    assert_eq!(cmds[0].at, "R.md:4");
    assert_eq!(cmds[2].at, "R.md:9");
    assert_eq!(cmds[3].block_skip.as_deref(), Some("needs docker"));
    assert!(cmds[0].block_skip.is_none() && cmds[4].block_skip.is_none());
    assert_eq!(
        placeholders("nats sub 'lineage.dev.parent.<parent>.>' <child> 2>/dev/null <parent>"),
        ["parent", "child", "parent"]
    );
    let line = "lineage interrupt <child> --as-user $ROOT   # or --as-ancestor <session>";
    assert_eq!(placeholders(line), ["child"]);
    assert_eq!(
        code_of("echo '# not' \"#\" a#b # c <x>"),
        "echo '# not' \"#\" a#b "
    );
    let values = HashMap::from([("child".to_owned(), "C1".to_owned())]);
    assert_eq!(
        substitute(line, &values),
        "lineage interrupt C1 --as-user $ROOT   # or --as-ancestor <session>"
    );
    assert_eq!(
        matching_line("leader*node-", "x\nleader   node-2", ""),
        Some("leader   node-2")
    );
    assert!(matching_line("node-*leader", "leader   node-2", "").is_none());
    assert_eq!(
        matching_line("stays up", "", "the cluster stays up; try:"),
        Some("the cluster stays up; try:")
    );
    assert!(matching_line("absent", "a", "b").is_none());
}
