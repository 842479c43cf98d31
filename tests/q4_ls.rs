//! Q4 on a real cluster: `lineage ls` lists and searches the registry's sessions by root,
//! parent, state, node, label and age, oldest first, in pages that walk every match exactly
//! once; bad flags are refused in one line (exit 2) before anything is asked.

use std::collections::BTreeSet;
use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(60);

fn sleeper() -> Value {
    json!({"turns": [[{"do": "sleep", "ms": 300000}]]})
}

fn labelled(shape: &str, node: &str, label: &str, script: Value) -> Value {
    let mut step = spawn_step(shape, node, label, script);
    step["label"] = json!(label);
    step
}

fn ids(listing: &Value) -> Vec<String> {
    listing["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("no sessions: {listing}"))
        .iter()
        .map(|s| s["session"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn q4_ls_filters_by_root_parent_state_node_label_and_age_and_pages_through_every_match() {
    let c = Cluster::start(3);
    let root_script = json!({
        "turns": [[
            labelled("continuable", "node-2", "worker", sleeper()),
            labelled("continuable", "node-3", "worker", sleeper()),
            labelled("one-shot", "node-2", "reviewer", json!({"turns": [[{"do": "reply", "text": "ok"}]]})),
            {"do": "reply", "text": "spawned"}
        ]],
        "after": {"do": "echo"}
    });
    let reply = c.spawn(&[
        "--node",
        "node-1",
        "--prompt",
        "go",
        "--script",
        &root_script.to_string(),
    ]);
    let root = id_of(&reply["session"]);
    let other = id_of(&c.spawn(&["--node", "node-3", "--prompt", "alone"])["session"]);
    let tree = wait_for(T, "the root and 3 children", || {
        let tree = c.tree(&root);
        (tree.len() == 4).then_some(tree)
    });
    let kids = Cluster::children(&tree, &root);
    let label_of = |id: &str| -> String {
        let listing = c.cli_json(&["ls", "--root", &root, "--limit", "10"]);
        listing["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session"] == id)
            .map(|s| s["label"].as_str().unwrap_or("-").to_owned())
            .unwrap()
    };
    let workers: BTreeSet<String> = kids
        .iter()
        .filter(|k| label_of(k) == "worker")
        .cloned()
        .collect();
    assert_eq!(workers.len(), 2, "{tree:?}");
    let reviewer = kids.iter().find(|k| !workers.contains(*k)).unwrap().clone();
    // The one-shot reviewer replies once and is disposed.
    c.wait_state(&root, &reviewer, "disposed", T);

    // By root: the root first (oldest), then its children, each once; the other tree apart.
    let by_root = ids(&c.cli_json(&["ls", "--root", &root]));
    assert_eq!(by_root.len(), 4, "{by_root:?}");
    assert_eq!(by_root[0], root);
    assert_eq!(
        ids(&c.cli_json(&["ls", "--root", &other])),
        vec![other.clone()]
    );
    // By parent, label, node, state, and together.
    let by_parent: BTreeSet<String> = ids(&c.cli_json(&["ls", "--parent", &root]))
        .into_iter()
        .collect();
    assert_eq!(by_parent, kids.iter().cloned().collect());
    let by_label: BTreeSet<String> = ids(&c.cli_json(&["ls", "--label", "worker"]))
        .into_iter()
        .collect();
    assert_eq!(by_label, workers);
    let on_2 = c.cli_json(&["ls", "--root", &root, "--node", "node-2"]);
    assert_eq!(ids(&on_2).len(), 2, "{on_2}");
    assert!(on_2["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["node"] == "node-2"));
    assert_eq!(
        ids(&c.cli_json(&["ls", "--state", "disposed"])),
        vec![reviewer.clone()]
    );
    let running_workers_on_3 = ids(&c.cli_json(&[
        "ls", "--state", "running", "--label", "worker", "--node", "node-3",
    ]));
    assert_eq!(running_workers_on_3.len(), 1);
    assert!(workers.contains(&running_workers_on_3[0]));
    // By age: nothing is an hour old; everything is older than 0 ms.
    assert!(ids(&c.cli_json(&["ls", "--older-than", "1h"])).is_empty());
    let (code, out, _) = c.cli(&["ls", "--older-than", "1h"]);
    assert_eq!((code, out.trim()), (0, "no session matches"));
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(ids(&c.cli_json(&["ls", "--older-than", "0ms"])).len(), 5);

    // Pages of one, followed by their cursors: every session once, oldest first.
    let mut walked = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..20 {
        let mut args = vec!["ls", "--limit", "1"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let page = c.cli_json(&args);
        walked.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(walked.len(), 5, "{walked:?}");
    assert_eq!(walked.iter().collect::<BTreeSet<_>>().len(), 5);
    let all = c.cli_json(&["ls", "--all", "--limit", "2"]);
    assert_eq!(ids(&all), walked, "--all walks the same pages");
    assert_eq!(all["next"], Value::Null);
    // The human form: one line per session, and where to go on.
    let (code, out, err) = c.cli(&["ls", "--root", &root, "--limit", "2"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with(&root) && lines[0].contains("node=node-1"),
        "{out}"
    );
    assert!(lines[2].starts_with("more: add --after "), "{out}");

    // Bad flags: one line, exit 2, nothing asked.
    for (args, says) in [
        (
            vec!["ls", "--state", "alive"],
            "is not a state; use starting, running",
        ),
        (vec!["ls", "--older-than", "10x"], "is not an age"),
        (
            vec!["ls", "--limit", "0"],
            "--limit 0 is out of range; use 1..=1000",
        ),
        (
            vec!["ls", "--after", "garbage"],
            "pass the `next` of the previous page",
        ),
        (vec!["ls", "--root", "not-an-id"], "--root"),
        (vec!["ls", "--node", "a b"], "--node"),
    ] {
        let (code, out, err) = c.cli(&args);
        assert_eq!(code, 2, "{args:?}: {out} {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
