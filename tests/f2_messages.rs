//! The first day's wrong advice, each message fixed and checked through the CLI against a real
//! cluster (issue 37, items 6 and 7): every one is one line, with the exit code of its kind,
//! and names the way out.

use std::process::Command;

use lineage_testkit::prelude::*;

/// `lineage` with `args` and `env`, not pointed at any cluster: (code, stdout, stderr).
fn lineage(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(lineage_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run lineage");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn one_line(err: &str) -> bool {
    err.trim().lines().count() == 1
}

#[test]
fn f2_each_message_names_the_way_out() {
    let c = Cluster::start(3);
    let unknown = "01936c1e-7a3b-7cde-8f00-00000000beef";

    // tree of an unknown root: lineage ls lists sessions (status does not).
    let (code, _, err) = c.cli(&["tree", unknown]);
    assert_eq!(code, 3, "{err}");
    assert!(
        one_line(&err) && err.contains("lineage ls") && !err.contains("lineage status"),
        "{err}"
    );

    // A node that is not in the cluster: the nodes there are.
    let (code, _, err) = c.cli(&["spawn", "--node", "node-9", "--prompt", "hi"]);
    assert_eq!(code, 5, "{err}");
    assert!(
        one_line(&err) && err.contains("no such node") && err.contains("node-1, node-2, node-3"),
        "{err}"
    );

    // A top-level spawn's shape and label are honoured or refused, never dropped (item 5):
    // one-shot and a label are a child's; refused in one line, nothing registered.
    let before = c.cli_json(&["ls", "--all"])["sessions"]
        .as_array()
        .map(Vec::len);
    assert!(before.is_some());
    for (flag, value, says) in [
        ("--shape", "one-shot", "leave --shape out"),
        ("--label", "mine", "leave --label out"),
    ] {
        let (code, _, err) = c.cli(&["spawn", "--prompt", "hi", flag, value]);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(one_line(&err) && err.contains(says), "{flag}: {err}");
    }
    let after = c.cli_json(&["ls", "--all"])["sessions"]
        .as_array()
        .map(Vec::len);
    assert_eq!(before, after, "a refused spawn registers nothing");

    // Another cluster name: the registry does not answer, and --cluster is named.
    let url = c.nats.url();
    let (code, _, err) = lineage(&["--nats", &url, "--cluster", "prod", "status"], &[]);
    assert_eq!(code, 5, "{err}");
    assert!(one_line(&err) && err.contains("--cluster"), "{err}");

    // Not a NATS URL: bad input (2), before anything is tried.
    let (code, _, err) = lineage(&["--nats", "http://127.0.0.1:4222", "status"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(one_line(&err) && err.contains("nats://"), "{err}");

    // A bad config value from the environment names the variable, in words.
    let (code, _, err) = lineage(&["config", "show"], &[("LINEAGE_LEASE__LEASE_MS", "abc")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        one_line(&err)
            && err.contains("LINEAGE_LEASE__LEASE_MS")
            && err.contains("a whole number")
            && !err.contains("u64"),
        "{err}"
    );
    // ... and from a TOML file, its line.
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("node.toml");
    std::fs::write(&toml, "cluster = \"dev\"\n\n[lease]\nlease_ms = true\n").unwrap();
    let (code, _, err) = lineage(&["config", "show", "--config", toml.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(one_line(&err) && err.contains("node.toml, line 4"), "{err}");

    // A script's bad field, by its path.
    let (code, _, err) = lineage(
        &[
            "script",
            "check",
            r#"{"turns":[[{"do":"reply","content":"a"},{"do":"sleep","ms":"soon"}]]}"#,
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        one_line(&err) && err.contains("at turns[0][1].ms") && err.contains("a whole number"),
        "{err}"
    );

    // lineage dev on a port that is taken says so (nothing to install).
    let port = url.rsplit(':').next().unwrap().to_owned();
    let (code, out, err) = lineage(&["dev", "--no-demo", "--nats-port", &port], &[]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains(&format!("port {port} is taken")) && !err.contains("install-deps"),
        "{err}"
    );

    // A verb's --help: its own options first, the cluster and connection flags under their
    // own heading.
    let (code, help, _) = lineage(&["spawn", "--help"], &[]);
    assert_eq!(code, 0);
    let own = help.find("--prompt").expect("spawn's own options");
    let global = help
        .find("Cluster and connection (every verb):")
        .expect("the global heading");
    assert!(own < global && help[global..].contains("--nats"), "{help}");
    assert!(!help[..global].contains("--tlscert"), "{help}");
}
