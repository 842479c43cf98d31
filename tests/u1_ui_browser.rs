//! Issue 36, U1: `lineage ui` in a real browser. A three-node cluster, a root on node-1 whose
//! scripted turn spawns a continuable child on node-2; `lineage ui` serves the page; headless
//! Chromium, driven by Selenium through chromedriver (`tests/ui/browser.py`, installed by
//! `scripts/install-deps.sh`), watches the tree: the child on node-2, a second child spawned
//! through the CLI while the page is open appearing without a reload, the first child's state
//! changing as its turn ends; then the sessions, session and cluster views, and an unknown and
//! a malformed id shown as readable messages; a drain clicked (confirmed) disposes the tree,
//! children first. An observer's page (`--read-only`, the shipped NATS permissions) reads the
//! tree and a transcript, offers no action, and its server refuses one. Screenshots of each
//! view are saved under
//! `target/ui-screenshots/` (the README's is one of them).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lineage_testkit::free_port;
use lineage_testkit::prelude::{id_of, lineage_bin, wait_for, Cluster};
use serde_json::json;

/// `lineage ui`, killed on drop.
struct Ui(Child);

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn child_script(label: &str, node: &str, turn: serde_json::Value) -> serde_json::Value {
    json!({"do": "spawn", "shape": "continuable", "node": node, "prompt": "work", "label": label,
           "agent": {"driver": "script", "script": {"turns": [turn]}}})
}

/// The browser and its driver are installed (scripts/install-deps.sh).
fn browser_installed() {
    for program in ["chromium", "chromedriver", "python3"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            found,
            "{program} is missing: run scripts/install-deps.sh (chromium, chromium-driver, selenium)"
        );
    }
}

/// A root on node-1 whose turn spawns the continuable child `first` on node-2 (whose turn is
/// `first_turn`): the root's id and the child's.
fn root_with_first_child(c: &Cluster, first_turn: serde_json::Value) -> (String, String) {
    let script = json!({"turns": [[child_script("first", "node-2", first_turn)]],
                        "after": {"do": "echo"}});
    let root = id_of(
        &c.spawn(&[
            "--node",
            "node-1",
            "--prompt",
            "go",
            "--script",
            &script.to_string(),
        ])["session"],
    );
    let first = wait_for(Duration::from_secs(30), "the first child", || {
        c.tree(&root)
            .into_iter()
            .find(|r| r["label"] == "first")
            .and_then(|r| r["session"].as_str().map(str::to_owned))
    });
    (root, first)
}

/// `lineage ui ARGS` against `c`'s cluster with `env`, once it serves: it and its port.
fn start_ui(c: &Cluster, args: &[&str], env: &[(&str, String)]) -> (Ui, u16) {
    let port = free_port().expect("a free port");
    let ui = Ui(Command::new(lineage_bin())
        .args(["--nats", &c.nats.url(), "--cluster", &c.cluster])
        .args(["ui", "--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start lineage ui"));
    wait_for(Duration::from_secs(30), "lineage ui to serve", || {
        matches!(lineage_testkit::http_get(port, "/"), Ok((200, _))).then_some(())
    });
    (ui, port)
}

/// Runs `tests/ui/browser.py` on the page at `port` with `args`; panics with what it saw when
/// a check failed. Screenshots go to `target/ui-screenshots/`, returned.
fn browse(port: u16, args: &[&str]) -> std::path::PathBuf {
    let screenshots = lineage_bin()
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("ui-screenshots");
    let out = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ui/browser.py"))
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .args(["--screenshots", screenshots.to_str().unwrap()])
        .args(args)
        .output()
        .expect("run tests/ui/browser.py");
    assert!(
        out.status.success(),
        "the browser saw:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    screenshots
}

#[test]
fn u1_a_tree_is_seen_live_in_a_browser_and_bad_ids_are_readable() {
    browser_installed();
    let c = Cluster::start(3);
    let (root, first) = root_with_first_child(
        &c,
        json!([{"do": "sleep", "ms": 3000}, {"do": "reply", "content": "first is done"}]),
    );
    let (ui, port) = start_ui(&c, &[], &[]);
    // The API answers what the verbs answer, and a bad id in one line.
    let (code, body) = lineage_testkit::http_get(port, "/api/session/nope").unwrap();
    assert_eq!(code, 400, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        error["error"].as_str().is_some_and(|e| !e.contains('\n')),
        "{body}"
    );

    let second_spawn = json!([
        lineage_bin(),
        "--nats",
        c.nats.url(),
        "--cluster",
        c.cluster,
        "spawn",
        "--parent",
        root,
        "--shape",
        "continuable",
        "--node",
        "node-2",
        "--label",
        "second",
        "--prompt",
        "more",
        "--script",
        // Its first turn sleeps until the page interrupts it; its second (the page's
        // followup) runs four seconds, which the page shows under way, then done.
        json!({"turns": [
            [{"do": "sleep", "ms": 60000}],
            [{"do": "sleep", "ms": 4000}, {"do": "reply", "content": "second turn done"}]
        ]})
        .to_string(),
    ])
    .to_string();
    let screenshots = browse(
        port,
        &[
            "--root",
            &root,
            "--first",
            &first,
            "--second-label",
            "second",
            "--second-spawn",
            &second_spawn,
        ],
    );
    assert!(screenshots.join("tree.png").exists());
    drop(ui);

    // With a token, an API call without it is refused in one line (and nothing is read);
    // with it (here as the event stream passes it, in the query) it is answered.
    let token = [("LINEAGE_UI_TOKEN", "a-long-random-token".to_owned())];
    let (_guarded, port) = start_ui(&c, &[], &token);
    let (code, body) = lineage_testkit::http_get(port, "/api/cluster").unwrap();
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("#token=") && !body.contains('\n'), "{body}");
    let (code, _) = lineage_testkit::http_get(port, "/api/cluster?token=wrong").unwrap();
    assert_eq!(code, 401);
    let (code, body) =
        lineage_testkit::http_get(port, "/api/cluster?token=a-long-random-token").unwrap();
    assert_eq!(code, 200, "{body}");
    // Another address without a token is refused at start, in one line.
    let (code, _, err) = c.cli(&["ui", "--listen", "0.0.0.0:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--token") && err.trim().lines().count() == 1,
        "{err}"
    );
}

#[test]
fn u1_z2_an_observers_page_reads_the_tree_and_cannot_act() {
    browser_installed();
    let c = Cluster::start_secured(3);
    let (root, first) =
        root_with_first_child(&c, json!([{"do": "reply", "content": "first is done"}]));
    let observer = [
        ("NATS_USER", "observer".to_owned()),
        ("NATS_PASSWORD", c.nats_password("observer")),
    ];
    // Not told --read-only: the observer's credentials make the page read only (it asks the
    // server what they allow); the operator's do not.
    let operator = [
        ("NATS_USER", "operator".to_owned()),
        ("NATS_PASSWORD", c.nats_password("operator")),
    ];
    let (operators_page, port) = start_ui(&c, &[], &operator);
    let (code, body) = lineage_testkit::http_get(port, "/api/mode").unwrap();
    assert_eq!((code, body.as_str()), (200, r#"{"read_only":false}"#));
    drop(operators_page);
    let (_ui, port) = start_ui(&c, &[], &observer);
    let (code, body) = lineage_testkit::http_get(port, "/api/mode").unwrap();
    assert_eq!((code, body.as_str()), (200, r#"{"read_only":true}"#));
    // The server refuses every action in one line, and the tree is still there after.
    let (code, body) = lineage_testkit::http(
        "POST",
        &format!("http://127.0.0.1:{port}/api/drain/{root}"),
        Some("{}"),
    )
    .unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("read only") && !body.contains('\n'), "{body}");
    let (code, body) = lineage_testkit::http_get(port, &format!("/api/tree/{root}")).unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(&first) && !body.contains("disposed"),
        "{body}"
    );
    browse(
        port,
        &[
            "--observer",
            "--root",
            &root,
            "--first",
            &first,
            "--second-label",
            "-",
            "--second-spawn",
            "[]",
        ],
    );
    // Everything the observer's page read, it was allowed to (the session log by direct get
    // included), and it sent no action to the cluster: no permission violation at all.
    let violations = c.permission_violations();
    assert!(violations.is_empty(), "{violations:#?}");
}
