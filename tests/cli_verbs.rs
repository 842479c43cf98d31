//! Every CLI verb against the built binary: `config show`, `status`, `watch`, `dev`, `--help`,
//! plus a non-voting client node hosting an ACP agent (H1, O1, O3).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use lineage_testkit::prelude::{lineage_bin, spawn_step, wait_for, Cluster};
use serde_json::json;

/// A child process stopped (by pid) when the test ends, even when an assertion fails first:
/// SIGTERM (so `lineage dev` stops its own nodes), then SIGKILL after 10 s.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        lineage_testkit::node::terminate(&mut self.0, Duration::from_secs(10));
    }
}

fn run(args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(lineage_bin());
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run lineage");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn o1_config_show_names_an_environment_variable_as_its_source_not_the_flag() {
    let source = |args: &[&str], env: &[(&str, &str)], key: &str| {
        let mut all = vec!["--json", "config", "show"];
        all.extend_from_slice(args);
        let (code, out, err) = run(&all, env);
        assert_eq!(code, 0, "{err}");
        let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        let row = rows.iter().find(|r| r["key"] == key).cloned().unwrap();
        (
            row["value"].clone(),
            row["source"].as_str().unwrap().to_owned(),
        )
    };
    let env = [
        ("NATS_URL", "nats://from-env:4222"),
        ("LINEAGE_CLUSTER", "envcluster"),
        ("LINEAGE_TOOLS__HTTP_ADDR", "127.0.0.1:7777"),
    ];
    let (value, src) = source(&[], &env, "nats_url");
    assert_eq!(value, "\"nats://from-env:4222\"");
    assert_eq!(src, "NATS_URL environment variable");
    let (value, src) = source(&[], &env, "cluster");
    assert_eq!(value, "\"envcluster\"");
    assert_eq!(src, "LINEAGE_CLUSTER environment variable");
    let (value, src) = source(&[], &env, "tools.http_addr");
    assert_eq!(value, "\"127.0.0.1:7777\"");
    assert!(src.contains("environment"), "{src}");
    // The flag given on the command line wins, and is named as the flag.
    let (value, src) = source(&["--nats", "nats://from-flag:4222"], &env, "nats_url");
    assert_eq!(value, "\"nats://from-flag:4222\"");
    assert_eq!(src, "--nats flag");
    let (_, src) = source(&[], &[("NATS_CREDS", "/tmp/x.creds")], "nats.creds");
    assert_eq!(src, "NATS_CREDS environment variable");
}

#[test]
fn o1_config_show_prints_values_with_sources_and_refuses_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lineage.toml");
    std::fs::write(&file, "cluster = \"prod\"\n[limits]\nmax_depth = 3\n").unwrap();
    let path = file.to_str().unwrap();
    let (code, out, err) = run(
        &["--json", "config", "show", "--config", path],
        &[("LINEAGE_LEASE__LEASE_MS", "7000")],
    );
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let find = |k: &str| rows.iter().find(|r| r["key"] == k).cloned().unwrap();
    assert_eq!(find("cluster")["value"], "\"prod\"");
    assert!(find("cluster")["source"].as_str().unwrap().contains("TOML"));
    assert_eq!(find("lease.lease_ms")["value"], "7000");
    assert!(find("lease.lease_ms")["source"]
        .as_str()
        .unwrap()
        .contains("environment"));
    assert_eq!(find("node.id")["source"], "default");

    // Invalid: names the key and the source, one line, exit 2 (usage).
    for (env, key) in [
        (("LINEAGE_LIMITS__MAX_DEPTH", "-1"), "limits.max_depth"),
        (
            ("LINEAGE_REGISTRY__VOTERS", "{1=\"a\",2=\"b\"}"),
            "registry.voters",
        ),
    ] {
        let (code, _, err) = run(&["config", "show", "--config", path], &[env]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(key) && err.contains("environment"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    std::fs::write(&file, "[registry]\nvoters = { 1 = \"a\", 2 = \"b\" }\n").unwrap();
    let (code, _, err) = run(&["node", "--config", path], &[]);
    assert_eq!(code, 2, "voters 2 must stop start-up: {err}");
    assert!(
        err.contains("registry.voters") && err.contains("1, 3 or 5"),
        "{err}"
    );
    let (code, _, err) = run(&["config", "show", "--config", "/nonexistent.toml"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn o3_every_verb_has_help_with_an_example() {
    // `bench --help` is the lab's (`lineage bench` runs `lineage-lab bench`).
    lineage_testkit::lab_bin();
    for verb in [
        "node",
        "dev",
        "spawn",
        "send",
        "interrupt",
        "tree",
        "drain",
        "watch",
        "status",
        "bench",
    ] {
        let (code, out, err) = run(&[verb, "--help"], &[]);
        assert_eq!(code, 0, "{verb}: {err}");
        assert!(
            out.contains("Example"),
            "{verb} --help has no example:\n{out}"
        );
    }
    let (code, out, _) = run(&["config", "show", "--help"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("Example"));
}

#[test]
fn o3_status_watch_and_a_client_node_hosting_an_acp_agent() {
    let cluster = Cluster::start(3);

    // status: leader, voters, nodes with leases, sessions by state.
    let status = cluster.cli_json(&["status"]);
    assert!(status["registry"]["leader"].as_u64().is_some(), "{status}");
    assert_eq!(status["registry"]["voters"], json!([1, 2, 3]));
    let nodes = status["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{status}");
    assert!(nodes.iter().all(|n| n["lease_live"] == true), "{status}");
    assert!(status["sessions"].get("running").is_some(), "{status}");
    // `nats micro ls` equivalent: every node answers `$SRV.PING.lineage` as a `lineage`
    // service instance, and `$SRV.INFO.lineage` lists its endpoints.
    let bus = cluster.bus();
    let (pings, info) = bus.rt.block_on(async {
        use futures::StreamExt;
        let inbox = bus.client.new_inbox();
        let mut sub = bus.client.subscribe(inbox.clone()).await.unwrap();
        bus.client
            .publish_with_reply("$SRV.PING.lineage", inbox, "".into())
            .await
            .unwrap();
        let mut pings = Vec::new();
        while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(700), sub.next()).await
        {
            pings.push(serde_json::from_slice::<serde_json::Value>(&msg.payload).unwrap());
        }
        let info = bus
            .client
            .request("$SRV.INFO.lineage", "".into())
            .await
            .unwrap();
        (
            pings,
            serde_json::from_slice::<serde_json::Value>(&info.payload).unwrap(),
        )
    });
    assert_eq!(
        pings.len(),
        3,
        "one lineage service instance per node: {pings:?}"
    );
    assert!(pings.iter().all(|p| p["name"] == "lineage"), "{pings:?}");
    let endpoints = info["endpoints"].to_string();
    for op in [
        "spawn",
        "followup",
        "interrupt",
        "drain",
        "resume",
        "status",
    ] {
        assert!(
            endpoints.contains(&format!("ctl.{op}")),
            "{op} missing: {endpoints}"
        );
    }

    let (code, text, _) = cluster.cli(&["status"]);
    assert_eq!(code, 0);
    assert!(text.contains("leader") && text.contains("node-2"), "{text}");

    // watch: a parent's children's start, report, settled and end, live.
    let root = cluster.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "idle"}]], "after": {"do": "echo"}}),
    );
    let mut watch = KillOnDrop(
        Command::new(lineage_bin())
            .args([
                "--nats",
                &cluster.nats.url(),
                "--cluster",
                &cluster.cluster,
                "--json",
                "watch",
                &root,
                "--count",
                "4",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = watch.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    std::thread::sleep(Duration::from_millis(700));
    let child_script = json!({"turns": [[
        {"do": "report", "content": "half way", "delivery": "quiet"},
        {"do": "reply", "text": "child done"}
    ]]});
    let step = spawn_step("continuable", "node-2", "work", child_script);
    let body = json!({"parent": root, "shape": "continuable", "node": "node-2", "prompt": "work",
        "agent": step["agent"]});
    let reply = cluster.ctl("spawn", body.to_string().as_bytes());
    assert!(reply.get("result").is_some(), "{reply}");
    wait_for(
        Duration::from_secs(20),
        "watch to exit after 4 events",
        || watch.0.try_wait().ok().flatten().map(|_| ()),
    );
    let collected = reader.join().unwrap();
    let kinds: Vec<String> = collected
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["event"]["event"]
                .as_str()
                .or(v["event"]["kind"].as_str())
                .unwrap_or("?")
                .to_owned()
        })
        .collect();
    for want in [
        "subagent/start",
        "subagent-report",
        "subagent/end",
        "subagent-settled",
    ] {
        assert!(
            kinds.iter().any(|k| k == want),
            "watch missed {want}: {kinds:?}"
        );
    }
}

/// Builds (if needed) and finds the ACP test agent next to the `lineage` binary.
fn acp_testagent() -> std::path::PathBuf {
    let path = lineage_bin().with_file_name("lineage-acp-testagent");
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "lineage-acp-testagent"])
            .status()
            .expect("cargo build");
        assert!(status.success());
    }
    path
}

#[test]
fn h1_o1_client_node_hosts_an_acp_agent_through_the_cluster() {
    let cluster = Cluster::start(1);
    // A non-voting node: registry client, agent host.
    let http_port = lineage_testkit::free_port().unwrap();
    let config = cluster.path().join("node-c.toml");
    std::fs::write(
        &config,
        format!(
            "cluster = \"{}\"\nnats_url = \"{}\"\n[node]\nid = \"node-c\"\ndata_dir = \"{}\"\nhttp_addr = \"127.0.0.1:{http_port}\"\n[registry]\nrole = \"client\"\nvoters = {{ 1 = \"node-1\" }}\nbootstrap = false\n[lease]\nlease_ms = 2000\nheartbeat_ms = 250\n[agents.acp-testagent]\ndriver = \"acp\"\ncommand = {:?}\ndescription = \"the ACP test agent\"\n",
            cluster.cluster,
            cluster.nats.url(),
            cluster.path().join("data-c").display(),
            acp_testagent().display().to_string(),
        ),
    )
    .unwrap();
    let log = std::fs::File::create(cluster.path().join("node-c.log")).unwrap();
    let _client_node = KillOnDrop(
        Command::new(lineage_bin())
            .args(["node", "--config", config.to_str().unwrap()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let ready = || {
        let (code, _) = lineage_testkit::http_get(http_port, "/readyz").ok()?;
        (code == 200).then_some(())
    };
    wait_for(
        Duration::from_secs(60),
        "the client node to be ready",
        ready,
    );
    let status = cluster.cli_json(&["status"]);
    assert_eq!(
        status["registry"]["voters"],
        json!([1]),
        "a client node is not a voter"
    );
    assert!(
        status["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["node"] == "node-c"),
        "{status}"
    );

    // T4: the node runs the profile its operator configured, by name.
    let reply = cluster.spawn(&[
        "--node",
        "node-c",
        "--prompt",
        "hello from lineage",
        "--profile",
        "acp-testagent",
    ]);
    assert_eq!(reply["node"], "node-c", "{reply}");
    let session = lineage_testkit::prelude::id_of(&reply["session"]);
    let log = wait_for(
        Duration::from_secs(20),
        "the ACP agent's reply in the log",
        || {
            let log = cluster.log(&session);
            log.iter()
                .any(|e| {
                    e.kind == "turn/assistant"
                        && e.data.to_string().contains("echo: hello from lineage")
                })
                .then_some(log)
        },
    );
    assert!(
        log.iter().any(|e| e.kind == "acp/session"),
        "the ACP session id is logged for session/load"
    );
}

#[test]
fn k1_x1_dev_runs_the_demo_on_a_local_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = KillOnDrop(
        Command::new(lineage_bin())
            .args([
                "dev",
                "--exit-after-demo",
                "--dir",
                dir.path().to_str().unwrap(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stdout), &mut text);
        text
    });
    let status = wait_for(
        Duration::from_secs(180),
        "lineage dev to finish the demo",
        || child.0.try_wait().ok().flatten(),
    );
    let out = reader.join().unwrap();
    assert!(status.success(), "lineage dev failed:\n{out}");
    for want in [
        "cluster dev up",
        "subagent-report",
        "subagent-settled",
        "killing node-3",
        "worker now on node-",
        "and delivered the message",
        "wave 0:",
        "demo done",
    ] {
        assert!(
            out.contains(want),
            "missing {want:?} in the demo output:\n{out}"
        );
    }
    // Issue 15: nats-server's store is under --dir too, not in a temp dir of its own.
    let stores: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("nats-") && e.path().is_dir())
        .collect();
    assert_eq!(
        stores.len(),
        1,
        "one nats-server store under --dir: {stores:?}"
    );
    // The tree after the drain shows every session disposed.
    let after = out.split("after the drain").nth(1).unwrap_or("");
    assert!(
        after.contains("disposed") && !after.contains(" running "),
        "{out}"
    );
}

#[test]
fn o2_node_exits_on_sigterm_even_when_nats_is_gone() {
    let nats = lineage_testkit::NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let http_port = lineage_testkit::free_port().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            "cluster = \"solo\"\nnats_url = \"{}\"\n[node]\nid = \"node-1\"\ndata_dir = \"{}\"\nhttp_addr = \"127.0.0.1:{http_port}\"\n",
            nats.url(),
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("node.log")).unwrap();
    let mut node = KillOnDrop(
        Command::new(lineage_bin())
            .args(["node", "--config", config.to_str().unwrap()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let ready = || {
        let (code, _) = lineage_testkit::http_get(http_port, "/readyz").ok()?;
        (code == 200).then_some(())
    };
    wait_for(Duration::from_secs(60), "the node to be ready", ready);
    drop(nats); // the NATS server dies first
    std::thread::sleep(Duration::from_millis(300));
    let pid = node.0.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = wait_for(
        Duration::from_secs(30),
        "the node to exit after SIGTERM",
        || node.0.try_wait().ok().flatten(),
    );
    assert!(status.success(), "node exited with {status}");
}

/// Issue 15 (O1, H1): the script language in one place. `lineage script schema` is a JSON
/// Schema that a validator this project did not write (Python `jsonschema`) accepts, and that
/// accepts the example of docs/script.md and refuses a bogus step; `lineage script check` says
/// ok, warns once per deprecated `text`, and refuses a bad step with one line, exit 2.
#[test]
fn o1_script_schema_validates_the_documented_example_and_check_warns_about_text() {
    let (code, schema, err) = run(&["script", "schema"], &[]);
    assert_eq!(code, 0, "{err}");
    let doc = std::fs::read_to_string(lineage_testkit::workspace_root().join("docs/script.md"))
        .expect("docs/script.md");
    let example = doc
        .split("```json\n")
        .nth(2)
        .and_then(|rest| rest.split("```").next())
        .expect("the example block of docs/script.md");
    let example: serde_json::Value = serde_json::from_str(example).expect("example is JSON");
    let bogus = serde_json::json!({"turns": [[{"do": "dance"}]]});
    let old = serde_json::json!({"turns": [[{"do": "reply", "text": "hi"}]]});
    let validate = |instance: &serde_json::Value| -> (bool, String) {
        let program = "import json, sys, jsonschema\n\
            schema = json.load(open(sys.argv[1]))\n\
            jsonschema.Draft202012Validator.check_schema(schema)\n\
            errors = list(jsonschema.Draft202012Validator(schema).iter_errors(json.loads(sys.argv[2])))\n\
            print('valid' if not errors else 'invalid: ' + errors[0].message)\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("schema.json");
        std::fs::write(&path, &schema).unwrap();
        let out = Command::new("python3")
            .args(["-c", program, path.to_str().unwrap(), &instance.to_string()])
            .output()
            .expect("python3 (scripts/install-deps.sh installs jsonschema)");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.status.success(),
            "jsonschema failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (text == "valid", text)
    };
    let (ok, why) = validate(&example);
    assert!(
        ok,
        "the documented example does not match the schema: {why}"
    );
    let (ok, why) = validate(&bogus);
    assert!(!ok, "a bogus step matched the schema: {why}");
    let (ok, _) = validate(&old);
    assert!(!ok, "the schema describes the deprecated `text`");

    let (code, out, err) = run(&["script", "check", &example.to_string()], &[]);
    assert_eq!(
        (code, out.trim()),
        (0, "script ok: 1 turn(s), 3 step(s)"),
        "{err}"
    );
    assert!(err.is_empty(), "{err}");
    let (code, out, err) = run(&["script", "check", &old.to_string()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        err.trim(),
        "warning: script.turns[0][0]: `reply` takes `content` now; `text` is deprecated (write {\"do\": \"reply\", \"content\": ...})"
    );
    let (code, _, err) = run(&["script", "check", &bogus.to_string()], &[]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("unknown variant `dance`"), "{err}");
    assert!(err.contains("lineage script schema"), "{err}");
}

/// A verb that prints ends quietly when its reader goes away, as Unix tools do
/// (`lineage config show | head -1`): no panic, no backtrace, no "Broken pipe" line.
#[test]
fn o1_a_closed_pipe_ends_a_printing_verb_quietly() {
    let config = lineage_testkit::workspace_root().join("config/lineage.toml");
    let line = format!(
        "'{}' config show --config '{}' | head -1",
        lineage_bin().display(),
        config.display()
    );
    let out = Command::new("bash")
        .args(["-c", &line])
        .output()
        .expect("bash");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
}
