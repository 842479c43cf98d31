//! Inspecting a cluster with the real `nats` CLI (natscli v0.5.0), as `docs/nats.md` shows it,
//! with the operator and observer users of the shipped permissions (O3, Z2), against three
//! voters and a worker node under those permissions: `nats sub` on one parent shows exactly its
//! children's start/end/inbox messages as JSON;
//! `nats micro ls` / `info` / `stats` list every node; `nats stream get` / `view` read the inbox;
//! a malformed control request gets a one-line error (with the `Nats-Service-Error` headers,
//! counted by `nats micro stats`); the registry's read side is the `lineage-registry` service of
//! the three voters; a parent's inbox consumer names its session (issue 15); the observer
//! cannot spawn.
//!
//! Skipped (with a message, the test passes) only when natscli is not installed and cannot be
//! (`go install github.com/nats-io/natscli/nats@v0.5.0`, as `scripts/install-deps.sh` does).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use lineage_testkit::prelude::{accepted, lineage_bin, spawn_step, wait_for, Cluster};
use serde_json::{json, Value};

/// Finds natscli (`nats` on PATH, then `~/go/bin/nats`), installing it with `go install` when
/// go is there; `None` when it cannot be had.
fn natscli() -> Option<PathBuf> {
    let find = || {
        let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join("nats")).collect())
            .unwrap_or_default();
        if let Some(home) = std::env::var_os("HOME") {
            candidates.push(Path::new(&home).join("go/bin/nats"));
        }
        candidates.into_iter().find(|p| p.is_file())
    };
    if let Some(p) = find() {
        return Some(p);
    }
    let installed = Command::new("go")
        .args(["install", "github.com/nats-io/natscli/nats@v0.5.0"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if installed {
        find()
    } else {
        None
    }
}

/// natscli with its own config directory (contexts are saved there, never in the real HOME).
struct Nats {
    bin: PathBuf,
    home: tempfile::TempDir,
}

impl Nats {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args);
        self.isolate(&mut c);
        c
    }

    /// The environment natscli (and `lineage --context`) read contexts from, and nothing else
    /// of the caller's NATS settings.
    fn isolate(&self, c: &mut Command) {
        c.env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join(".config"));
        for var in [
            "NATS_URL",
            "NATS_USER",
            "NATS_PASSWORD",
            "NATS_CONTEXT",
            "NATS_CREDS",
            "NATS_TOKEN",
            "NATS_NKEY",
        ] {
            c.env_remove(var);
        }
    }

    /// Runs `nats ARGS` to the end: (exit code, stdout, stderr).
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out: Output = self
            .command(args)
            .stdin(Stdio::null())
            .output()
            .expect("run nats");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs `nats ARGS`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "nats {args:?} failed: {err}\n{out}");
        out
    }
}

/// A process stopped by pid (SIGTERM, then SIGKILL) when dropped, with its output in a file.
struct Background {
    child: Child,
    out: PathBuf,
}

impl Background {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stop(&mut self) -> String {
        lineage_testkit::node::terminate(&mut self.child, Duration::from_secs(5));
        self.output()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn background(mut cmd: Command, out: PathBuf) -> Background {
    let file = std::fs::File::create(&out).unwrap();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("spawn");
    Background { child, out }
}

/// The messages `nats sub` printed: (subject, JSON payload).
fn received(output: &str) -> Vec<(String, Value)> {
    let mut messages = Vec::new();
    let mut subject: Option<String> = None;
    for line in output.lines() {
        if line.starts_with("[#") {
            // `[#1] Received on "<subject>"`, or from a stream
            // `[#1] Received JetStream message: stream: S seq: N / ... / subject: <subject> / ...`
            subject = match line.split_once(" subject: ") {
                Some((_, rest)) => rest.split(' ').next().map(str::to_owned),
                None => line.split('"').nth(1).map(str::to_owned),
            };
        } else if line.starts_with('{') {
            let s = subject
                .take()
                .unwrap_or_else(|| panic!("a payload without a subject line:\n{output}"));
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!("nats sub printed a payload that is not JSON ({e}): {line}")
            });
            messages.push((s, v));
        }
    }
    messages
}

/// `--context lineage-<user>` and `args`.
fn ctx(user: &str, args: &[&str]) -> Vec<String> {
    let mut all = vec!["--context".to_owned(), format!("lineage-{user}")];
    all.extend(args.iter().map(|s| s.to_string()));
    all
}

/// Borrowed arguments.
fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The errors every instance of `service` counted, as `nats micro stats --json` shows them
/// (read as the observer).
fn service_errors(nats: &Nats, service: &str) -> u64 {
    let out = nats.ok(&strs(&ctx(
        "observer",
        &["micro", "stats", service, "--json"],
    )));
    let stats: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("nats micro stats --json is not JSON ({e}): {out}"));
    let instances = match &stats {
        Value::Array(all) => all.clone(),
        one => vec![one.clone()],
    };
    instances
        .iter()
        .flat_map(|i| i["endpoints"].as_array().cloned().unwrap_or_default())
        .map(|e| e["num_errors"].as_u64().unwrap_or(0))
        .sum()
}

/// A spawn request body for `lineage.dev.ctl.spawn`: a continuable child of `parent` on `node`.
fn spawn_body(parent: &str, node: &str, script: Value) -> String {
    let step = spawn_step("continuable", node, "work", script);
    json!({"parent": parent, "shape": "continuable", "node": node, "prompt": "work",
        "agent": step["agent"]})
    .to_string()
}

#[test]
fn o3_natscli_inspects_a_cluster_with_the_shipped_operator_and_observer_users() {
    let Some(bin) = natscli() else {
        eprintln!(
            "SKIPPED o3_natscli: natscli is not installed and `go install github.com/nats-io/natscli/nats@v0.5.0` failed (run scripts/install-deps.sh)"
        );
        return;
    };
    let nats = Nats {
        bin,
        home: tempfile::tempdir().unwrap(),
    };
    let (_, version, _) = nats.run(&["--version"]);
    eprintln!("natscli {}", version.trim());

    let mut cluster = Cluster::start_secured(3);
    cluster.add_worker("node-4");
    let url = cluster.nats.url();

    // The README's contexts, one per shipped user.
    let operator_pw = cluster.nats_password("operator");
    let observer_pw = cluster.nats_password("observer");
    nats.ok(&[
        "context",
        "save",
        "lineage-operator",
        "--server",
        &url,
        "--user",
        "operator",
        "--password",
        &operator_pw,
    ]);
    nats.ok(&[
        "context",
        "save",
        "lineage-observer",
        "--server",
        &url,
        "--user",
        "observer",
        "--password",
        &observer_pw,
    ]);
    let op = |args: &[&str]| {
        let mut all = vec!["--context", "lineage-operator"];
        all.extend_from_slice(args);
        all.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    let obs = |args: &[&str]| {
        let mut all = vec!["--context", "lineage-observer"];
        all.extend_from_slice(args);
        all.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };

    // lineage itself reads the same natscli context.
    let mut status = Command::new(lineage_bin());
    status.args(["--context", "lineage-operator", "status"]);
    nats.isolate(&mut status);
    let out = status.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("node-4"),
        "lineage --context lineage-operator status: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Two roots: the watched one and another whose children must not show.
    let idle = json!({"turns": [[{"do": "reply", "text": "idle"}]], "after": {"do": "echo"}});
    let root = cluster.spawn_root("node-1", &idle);
    let other = cluster.spawn_root("node-2", &idle);

    // The observer watches the root's subjects.
    let sub_args = obs(&["sub", &format!("lineage.dev.parent.{root}.>")]);
    let mut sub = background(
        nats.command(&strs(&sub_args)),
        nats.home.path().join("sub.out"),
    );
    wait_for(Duration::from_secs(10), "nats sub to subscribe", || {
        sub.output().contains("Subscribing on").then_some(())
    });
    // The same from lineage, as the operator (it reads the natscli context).
    let mut watch_cmd = Command::new(lineage_bin());
    watch_cmd.args([
        "--context",
        "lineage-operator",
        "--json",
        "watch",
        &root,
        "--count",
        "8",
    ]);
    nats.isolate(&mut watch_cmd);
    let mut watch = background(watch_cmd, nats.home.path().join("watch.out"));
    std::thread::sleep(Duration::from_millis(700));

    // The operator spawns with `nats req`: two children of the root (one on the worker, one that
    // has a child of its own, which the root's subscriber must not see) and one of the other.
    let reporting = json!({"turns": [[
        {"do": "report", "content": "half way", "delivery": "quiet"},
        {"do": "reply", "text": "child done"}
    ]], "after": {"do": "echo"}});
    let with_grandchild = json!({"turns": [[
        spawn_step("continuable", "node-3", "deeper", reporting.clone()),
        {"do": "report", "content": "half way", "delivery": "quiet"},
        {"do": "reply", "text": "child done"}
    ]], "after": {"do": "echo"}});
    let mut children = Vec::new();
    for (parent, node, script) in [
        (&root, "node-4", &reporting),
        (&root, "node-2", &with_grandchild),
        (&other, "node-3", &reporting),
    ] {
        let body = spawn_body(parent, node, script.clone());
        let req = op(&["req", "lineage.dev.ctl.spawn", &body]);
        let out = nats.ok(&strs(&req));
        let reply: Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("spawn reply is not JSON ({e}): {out}"));
        let session = reply["result"]["session"]
            .as_str()
            .unwrap_or_else(|| panic!("spawn refused: {reply}"))
            .to_owned();
        if parent == &root {
            children.push(session);
        }
    }
    cluster.wait_log(&root, Duration::from_secs(30), "both settlements", |log| {
        accepted(log, "subagent-settled", None).len() == 2
    });
    cluster.wait_log(
        &other,
        Duration::from_secs(30),
        "the other settlement",
        |log| accepted(log, "subagent-settled", None).len() == 1,
    );
    wait_for(Duration::from_secs(10), "8 messages in nats sub", || {
        (received(&sub.output()).len() >= 8).then_some(())
    });
    wait_for(
        Duration::from_secs(10),
        "lineage watch to exit after 8 events",
        || watch.child.try_wait().ok().flatten().map(|_| ()),
    );
    let watched = watch.stop();
    let watched: Vec<&str> = watched.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(watched.len(), 8, "lineage watch printed:\n{watched:?}");
    std::thread::sleep(Duration::from_millis(1000));
    let output = sub.stop();
    let messages = received(&output);
    // Exactly: per child one start, one end, one report, one settlement; nothing else.
    assert_eq!(messages.len(), 8, "nats sub printed:\n{output}");
    for child in &children {
        let of = |suffix: &str, field: &str, value: &str| {
            messages
                .iter()
                .filter(|(s, v)| {
                    s == &format!("lineage.dev.parent.{root}.{suffix}")
                        && (v["child_id"] == child.as_str()
                            || v["sender_session_id"] == child.as_str())
                        && v[field] == value
                        && v["parent_session_id"] == root.as_str()
                })
                .count()
        };
        assert_eq!(
            of("start", "event", "subagent/start"),
            1,
            "start of {child}:\n{output}"
        );
        assert_eq!(
            of("end", "event", "subagent/end"),
            1,
            "end of {child}:\n{output}"
        );
        assert_eq!(
            of("inbox", "kind", "subagent-report"),
            1,
            "report of {child}:\n{output}"
        );
        assert_eq!(
            of("inbox", "kind", "subagent-settled"),
            1,
            "settled {child}:\n{output}"
        );
    }

    // Both users read: services, streams, single messages.
    for user in ["observer", "operator"] {
        // Every node is a `lineage` service instance.
        let ls = nats.ok(&strs(&ctx(user, &["micro", "ls"])));
        for node in ["node-1", "node-2", "node-3", "node-4"] {
            assert!(
                ls.contains(&format!("node {node}")),
                "{node} missing:\n{ls}"
            );
        }
        let info = nats.ok(&strs(&ctx(user, &["micro", "info", "lineage"])));
        for op_name in [
            "spawn",
            "followup",
            "interrupt",
            "drain",
            "resume",
            "status",
        ] {
            assert!(
                info.contains(&format!("lineage.dev.ctl.{op_name}")),
                "{op_name} missing:\n{info}"
            );
        }
        // Issue 15: every endpoint says what it does (its `description` metadata), whole
        // (natscli cuts long values such as the JSON schemas with " ... ").
        assert!(
            info.contains("description: spawn a top-level session or a child of one")
                && info.contains("description: drain subtrees children first and dispose them")
                && !info
                    .lines()
                    .any(|l| l.contains("description:") && l.contains(" ... ")),
            "endpoint descriptions missing:\n{info}"
        );
        let stats = nats.ok(&strs(&ctx(user, &["micro", "stats", "lineage"])));
        let ids: Vec<&str> = ls
            .lines()
            .filter(|l| l.contains("lineage control, cluster dev"))
            .filter_map(|l| l.split('│').nth(3).map(str::trim))
            .collect();
        assert_eq!(ids.len(), 4, "{ls}");
        for id in &ids {
            assert!(
                stats.contains(id),
                "instance {id} missing in stats:\n{stats}"
            );
        }

        // Issue 15: the registry's read side, one `lineage-registry` instance per voter, with
        // its endpoints described; a read through its subject answers.
        let registry_instances = ls
            .lines()
            .filter(|l| l.contains("lineage registry reads, cluster dev"))
            .count();
        assert_eq!(registry_instances, 3, "{ls}");
        let info = nats.ok(&strs(&ctx(user, &["micro", "info", "lineage-registry"])));
        assert!(
            info.contains("lineage.dev.registry.read")
                && info.contains("description: a registry query; any member answers")
                && info.contains("description: a registry query to member ")
                && !info.contains(".write")
                && !info.contains(".raft."),
            "lineage-registry endpoints:\n{info}"
        );
        let stats = nats.ok(&strs(&ctx(user, &["micro", "stats", "lineage-registry"])));
        assert!(stats.contains("read-direct"), "{stats}");
        let read = nats.ok(&strs(&ctx(
            user,
            &[
                "req",
                "lineage.dev.registry.read",
                r#"{"consistency":"stale","query":{"query":"session_counts"}}"#,
            ],
        )));
        let read: Value = serde_json::from_str(read.trim())
            .unwrap_or_else(|e| panic!("registry read is not JSON ({e}): {read}"));
        assert_eq!(read["reply"], "done", "{read}");
        assert_eq!(read["result"]["result"], "counts", "{read}");

        // Issue 15: the root's durable inbox consumer names its session.
        let consumer = nats.ok(&strs(&ctx(
            user,
            &[
                "consumer",
                "info",
                "LINEAGE_DEV_INBOX",
                &format!("inbox-{root}"),
            ],
        )));
        assert!(
            consumer.contains(&format!("lineage inbox of session {root} (cluster dev)")),
            "consumer info:\n{consumer}"
        );

        // The inbox stream: the root's last inbox message is its second child's settlement.
        let get = nats.ok(&strs(&ctx(
            user,
            &[
                "stream",
                "get",
                "LINEAGE_DEV_INBOX",
                "--last-for",
                &format!("lineage.dev.parent.{root}.inbox"),
            ],
        )));
        let json_line = get
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON in stream get:\n{get}"));
        let last: Value = serde_json::from_str(json_line).unwrap();
        assert_eq!(last["kind"], "subagent-settled", "{get}");
        assert_eq!(last["parent_session_id"], root.as_str(), "{get}");
        assert!(get.contains("Nats-Msg-Id"), "{get}");
        let first = nats.ok(&strs(&ctx(
            user,
            &["stream", "get", "LINEAGE_DEV_INBOX", "1"],
        )));
        assert!(first.contains("LINEAGE_DEV_INBOX#1"), "{first}");
        // The root's session log: its last message.
        let get = nats.ok(&strs(&ctx(
            user,
            &[
                "stream",
                "get",
                "LINEAGE_DEV_EVENTS",
                "--last-for",
                &format!("lineage.dev.session.{root}.events"),
            ],
        )));
        assert!(
            get.contains(&format!("lineage.dev.session.{root}.events")),
            "{get}"
        );
        assert!(
            get.lines()
                .any(|l| l.starts_with('{') || l.starts_with('[')),
            "{get}"
        );
        for stream in ["LINEAGE_DEV_INBOX", "LINEAGE_DEV_EVENTS"] {
            let info = nats.ok(&strs(&ctx(user, &["stream", "info", stream])));
            assert!(
                info.contains(&format!("Information for Stream {stream}")),
                "{info}"
            );
        }
    }

    // The root's inbox from its first message, without a terminal (an ephemeral consumer of
    // the operator's own): its children's reports and settlements.
    let replay = nats.ok(&strs(&op(&[
        "sub",
        &format!("lineage.dev.parent.{root}.inbox"),
        "--stream",
        "LINEAGE_DEV_INBOX",
        "--all",
        "--count",
        "4",
    ])));
    let kinds: Vec<String> = received(&replay)
        .iter()
        .map(|(_, v)| v["kind"].as_str().unwrap_or("?").to_owned())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "subagent-settled").count(),
        2,
        "{replay}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "subagent-report").count(),
        2,
        "{replay}"
    );

    // Listing every stream (other clusters' too) is refused.
    for user in ["observer", "operator"] {
        let (_, out, err) = nats.run(&strs(&ctx(user, &["stream", "ls"])));
        assert!(
            err.contains("Permissions Violation for Publish to \"$JS.API.STREAM.LIST\""),
            "{user} stream ls: {err}{out}"
        );
    }

    // `stream view` pages interactively: without a terminal it refuses; in one (a pty from
    // `script`) the operator sees the inbox. The observer may not create the consumer it needs.
    let (code, _, err) = nats.run(&strs(&op(&["stream", "view", "LINEAGE_DEV_INBOX"])));
    assert_ne!(code, 0);
    assert!(err.contains("requires a valid terminal"), "{err}");
    if Command::new("script").arg("--version").output().is_ok() {
        let view = |user: &str, file: &str| {
            let line = format!(
                "{} --context lineage-{user} stream view LINEAGE_DEV_INBOX",
                nats.bin.display()
            );
            let mut c = Command::new("script");
            c.args(["-qec", &line, "/dev/null"]);
            nats.isolate(&mut c);
            let mut bg = background(c, nats.home.path().join(file));
            // Whatever it showed within 8 s is what the assertions judge.
            let _ = lineage_testkit::poll(Duration::from_secs(8), || {
                bg.output().contains("subagent-settled")
            });
            bg.stop()
        };
        let seen = view("operator", "view-operator.out");
        assert!(
            seen.contains("Subject: lineage.dev.parent.") && seen.contains("subagent-settled"),
            "operator's stream view:\n{seen}"
        );
        let refused = view("observer", "view-observer.out");
        assert!(
            refused.contains(
                "Permissions Violation for Publish to \"$JS.API.CONSUMER.CREATE.LINEAGE_DEV_INBOX"
            ),
            "observer's stream view:\n{refused}"
        );
    } else {
        eprintln!(
            "o3_natscli: `script` (util-linux) is missing: stream view in a terminal not checked"
        );
    }

    // A malformed control request: one line of JSON error, and (issue 15) the micro
    // protocol's error headers, which natscli prints on stderr; `nats micro stats` counts it.
    let errors_before = service_errors(&nats, "lineage");
    let (code, out, err) = nats.run(&strs(&op(&["req", "lineage.dev.ctl.spawn", "not json"])));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    let reply: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(reply["error"]["code"], "bad_request", "{out}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains('\n') && message.contains("spawn"),
        "{message}"
    );
    assert!(
        err.contains("Nats-Service-Error-Code: 400")
            && err.contains(&format!("Nats-Service-Error: {message}")),
        "no error headers: {err}"
    );
    // More bad requests: unknown sessions (not_found, 404) and a bad body on another op.
    let unknown = uuid::Uuid::now_v7().to_string();
    let (_, out, err) = nats.run(&strs(&op(&[
        "req",
        "lineage.dev.ctl.resume",
        &json!({"session": unknown}).to_string(),
    ])));
    let reply: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(reply["error"]["code"], "not_found", "{out}");
    assert!(err.contains("Nats-Service-Error-Code: 404"), "{err}");
    for _ in 0..3 {
        let (_, out, err) = nats.run(&strs(&op(&["req", "lineage.dev.ctl.drain", "[1,2]"])));
        assert!(out.contains("\"bad_request\""), "{out}");
        assert!(err.contains("Nats-Service-Error-Code: 400"), "{err}");
    }
    let counted = wait_for(
        Duration::from_secs(5),
        "5 more errors in nats micro stats",
        || {
            let now = service_errors(&nats, "lineage");
            (now >= errors_before + 5).then_some(now)
        },
    );
    assert_eq!(counted, errors_before + 5, "counted more errors than sent");
    // The table natscli shows has them too.
    let table = nats.ok(&strs(&obs(&["micro", "stats", "lineage"])));
    assert!(table.contains("Errors"), "{table}");

    // The observer asks for status but cannot spawn: the server refuses the publish.
    let status = nats.ok(&strs(&obs(&["req", "lineage.dev.ctl.status", "{}"])));
    assert!(status.contains("\"result\""), "{status}");
    let body = spawn_body(&root, "node-1", reporting.clone());
    let (code, out, err) = nats.run(&strs(&obs(&["req", "lineage.dev.ctl.spawn", &body])));
    eprintln!("observer's nats req lineage.dev.ctl.spawn: exit {code}, stderr: {err}");
    assert!(!out.contains("\"result\""), "the observer spawned: {out}");
    assert!(
        err.contains("Permissions Violation for Publish to \"lineage.dev.ctl.spawn\""),
        "{err}"
    );
    assert_eq!(
        Cluster::children(&cluster.tree(&root), &root).len(),
        2,
        "a child was added by the observer"
    );

    // Drain progress: the observer watches the drain the operator asks for.
    let drain = uuid::Uuid::now_v7().to_string();
    let progress_args = obs(&["sub", &format!("lineage.dev.drain.{drain}.progress")]);
    let mut progress = background(
        nats.command(&strs(&progress_args)),
        nats.home.path().join("progress.out"),
    );
    wait_for(Duration::from_secs(10), "nats sub to subscribe", || {
        progress.output().contains("Subscribing on").then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    let body = json!({"roots": [root], "progress": drain}).to_string();
    let out = nats.ok(&strs(&op(&["req", "lineage.dev.ctl.drain", &body])));
    assert!(out.contains("\"result\""), "drain: {out}");
    wait_for(
        Duration::from_secs(10),
        "the drain's last wave_done",
        || {
            received(&progress.output())
                .iter()
                .any(|(_, v)| {
                    v["phase"] == "wave_done"
                        && v["wave"].as_u64().map(|w| w + 1) == v["waves"].as_u64()
                })
                .then_some(())
        },
    );
    let shown = progress.stop();
    let phases: Vec<String> = received(&shown)
        .iter()
        .map(|(s, v)| {
            assert_eq!(s, &format!("lineage.dev.drain.{drain}.progress"));
            v["phase"].as_str().unwrap_or("?").to_owned()
        })
        .collect();
    assert_eq!(
        phases.first().map(String::as_str),
        Some("planned"),
        "{shown}"
    );
    assert!(phases.iter().any(|p| p == "wave_done"), "{shown}");

    // Nothing the nodes, the CLI or the operator did was refused, but its `stream ls` (above)
    // and the pager's acks and
    // its consumer delete at exit (the operator may not ack or delete consumers: those could
    // be a parent's `inbox-<parent>`; nats-server removes the pager's consumer after its
    // inactivity threshold).
    let unexpected: Vec<String> = cluster
        .permission_violations()
        .into_iter()
        .filter(|l| !l.contains("user:observer"))
        .filter(|l| !(l.contains("user:operator") && l.contains("\"$JS.API.STREAM.LIST\"")))
        .filter(|l| {
            !(l.contains("user:operator")
                && (l.contains("\"$JS.ACK.LINEAGE_DEV_INBOX.stream_pager_")
                    || l.contains("\"$JS.API.CONSUMER.DELETE.LINEAGE_DEV_INBOX.stream_pager_")))
        })
        .collect();
    assert!(unexpected.is_empty(), "refused:\n{}", unexpected.join("\n"));
}
