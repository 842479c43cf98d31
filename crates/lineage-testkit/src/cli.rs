//! The `lineage` CLI against a [`Cluster`]: exit code and output ([`Cluster::cli`]), `--json`
//! replies ([`Cluster::cli_json`]), and the verbs tests use most (spawn, tree, a session's
//! state).

use std::process::{Command, Output};
use std::time::Duration;

use crate::{lineage_bin, wait_for, Cluster};

impl Cluster {
    /// Runs the CLI against this cluster: (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        self.cli_env(&[], args)
    }

    /// [`Cluster::cli`] with extra environment variables (e.g. `TRACEPARENT`).
    pub fn cli_env(&self, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
        // A secured cluster's CLI runs as `operator` unless `env` says otherwise.
        let operator: Vec<(String, String)> = match &self.secured {
            Some(s) => vec![
                ("NATS_USER".into(), "operator".into()),
                (
                    "NATS_PASSWORD".into(),
                    s.passwords.of("operator").to_owned(),
                ),
            ],
            None => Vec::new(),
        };
        let out: Output = Command::new(lineage_bin())
            .args(["--nats", &self.nats.url(), "--cluster", &self.cluster])
            .args(args)
            .envs(operator.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied())
            .output()
            .expect("run lineage");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs the CLI with `--json` and parses stdout; panics with stderr when it failed.
    pub fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let (code, out, err) = self.cli(&all);
        assert_eq!(
            code,
            0,
            "lineage {args:?} failed: {err}\n{out}\nlogs:\n{}",
            self.logs()
        );
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    /// [`Cluster::cli`] as shipped NATS user `user` (`NATS_USER`/`NATS_PASSWORD`, the natscli
    /// names the CLI reads).
    pub fn cli_as(&self, user: &str, args: &[&str]) -> (i32, String, String) {
        let password = self.nats_password(user);
        self.cli_env(&[("NATS_USER", user), ("NATS_PASSWORD", &password)], args)
    }

    /// `lineage --json spawn ARGS` -> the reply object.
    pub fn spawn(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["spawn"];
        all.extend_from_slice(args);
        self.cli_json(&all)
    }

    /// `lineage spawn` of a top-level session on `node` running `script`; returns its id.
    pub fn spawn_root(&self, node: &str, script: &serde_json::Value) -> String {
        let text = script.to_string();
        let reply = self.spawn(&["--node", node, "--prompt", "go", "--script", &text]);
        id_of(&reply["session"])
    }

    /// `lineage --json tree ROOT` -> one object per session.
    pub fn tree(&self, root: &str) -> Vec<serde_json::Value> {
        match self.cli_json(&["tree", root]) {
            serde_json::Value::Array(items) => items,
            other => panic!("tree --json is not an array: {other}"),
        }
    }

    /// The tree row of `session` under `root`.
    pub fn row(&self, root: &str, session: &str) -> serde_json::Value {
        self.tree(root)
            .into_iter()
            .find(|r| r["session"] == session)
            .unwrap_or_else(|| panic!("{session} is not in the tree of {root}"))
    }

    /// Polls the tree of `root` until `session` is in `state`.
    pub fn wait_state(&self, root: &str, session: &str, state: &str, limit: Duration) {
        wait_for(limit, format_args!("{session} to be {state}"), || {
            let items = self.tree(root);
            let row = items.iter().find(|r| r["session"] == session);
            match row {
                Some(row) if row["state"] == state => Ok(()),
                Some(row) => Err(format!("state {}", row["state"])),
                None => Err(format!("not in the tree of {root}")),
            }
        });
    }

    /// Polls `lineage status` until `node`'s lease is live (or, with `live` false, expired).
    pub fn wait_lease(&self, node: &str, live: bool, limit: Duration) {
        wait_for(limit, format_args!("{node} lease live={live}"), || {
            let status = self.cli_json(&["status"]);
            let row = status["nodes"]
                .as_array()?
                .iter()
                .find(|n| n["node"] == node)?
                .clone();
            (row["lease_live"] == live).then_some(())
        });
    }

    /// Direct children of `parent` in a tree listing, in registration order.
    pub fn children(tree: &[serde_json::Value], parent: &str) -> Vec<String> {
        let mut kids: Vec<&serde_json::Value> =
            tree.iter().filter(|r| r["parent"] == parent).collect();
        kids.sort_by_key(|r| {
            (
                r["created_at_ms"].as_u64(),
                r["session"].as_str().map(str::to_owned),
            )
        });
        kids.iter().map(|r| id_of(&r["session"])).collect()
    }
}

/// A JSON string value as an owned id.
pub fn id_of(v: &serde_json::Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string id, got {v}"))
        .to_owned()
}

/// What a `lineage --json chaos ...` run said: whether it exited 0, its JSON report and its
/// stderr (the fault log).
#[derive(Debug)]
pub struct ChaosRun {
    /// Exit code 0: every check passed.
    pub passed: bool,
    /// The report (`--json`): faults per kind, workloads, Porcupine's verdict, violations.
    pub report: serde_json::Value,
    /// What it printed on stderr.
    pub stderr: String,
}

/// Runs `lineage --json chaos <args>` (it starts its own cluster) and parses its report;
/// `None`, after printing why the calling test skips, when toxiproxy-server is missing and
/// cannot be installed. Panics with its output when it printed no report.
pub fn lineage_chaos(args: &[&str]) -> Option<ChaosRun> {
    if crate::toxiproxy::toxiproxy().is_none() {
        println!(
            "skipped: toxiproxy-server is not installed and `go install` could not install it"
        );
        return None;
    }
    crate::binary::lab_bin();
    let out = Command::new(lineage_bin())
        .args(["--json", "chaos"])
        .args(args)
        .output()
        .expect("run lineage chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("{stderr}");
    let report: serde_json::Value = stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON report from lineage chaos:\n{stdout}\n{stderr}"));
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
    Some(ChaosRun {
        passed: out.status.success(),
        report,
        stderr,
    })
}
