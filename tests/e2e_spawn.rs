//! End to end, spawn (S1, S2, S3, D1, E1, P1, G1): a root on node-1 spawns a continuable child on
//! node-2 and a one-shot child on node-3; the registry (`tree --json`) and the session logs
//! show depth, placement and states.

use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::json;

#[test]
fn s1_s3_d1_spawn_both_shapes_across_nodes() {
    let c = Cluster::start(3);
    let root_script = json!({
        "turns": [[
            {"do": "reply", "text": "root starting"},
            spawn_step("continuable", "node-2", "dig", json!({"turns": [[{"do": "reply", "text": "dug it"}]]})),
            spawn_step("one-shot", "node-3", "quick", json!({"turns": [[{"do": "reply", "text": "one-shot result"}]]})),
        ]],
        "after": {"do": "echo"}
    });
    let root = c.spawn_root("node-1", &root_script);

    // Both children registered, the continuable one settled, the one-shot one disposed.
    let tree = wait_for(
        Duration::from_secs(20),
        "two children, settled and disposed",
        || {
            let tree = c.tree(&root);
            let states: Vec<&str> = tree.iter().filter_map(|r| r["state"].as_str()).collect();
            (tree.len() == 3 && states.contains(&"settled") && states.contains(&"disposed"))
                .then_some(tree)
        },
    );
    let r = tree.iter().find(|r| r["session"] == root.as_str()).unwrap();
    assert_eq!(r["depth"], 0);
    assert_eq!(r["parent"], json!(null));
    assert_eq!(r["node"], "node-1");
    assert_eq!(r["state"], "running");
    assert_eq!(r["live"], true, "a top-level session stays live: {r}");
    let cont = tree
        .iter()
        .find(|r| r["shape"] == "continuable")
        .expect("continuable child");
    let once = tree
        .iter()
        .find(|r| r["shape"] == "one-shot")
        .expect("one-shot child");
    for (row, node) in [(cont, "node-2"), (once, "node-3")] {
        assert_eq!(row["parent"], root.as_str(), "{row}");
        assert_eq!(row["depth"], 1, "{row}");
        assert_eq!(row["node"], node, "{row}");
        assert_eq!(row["epoch"], 1, "{row}");
    }
    assert_eq!(cont["state"], "settled", "{cont}");
    assert_eq!(once["state"], "disposed", "{once}");
    assert_eq!(once["live"], false);
    let cont_id = id_of(&cont["session"]);
    let once_id = id_of(&once["session"]);

    // The root's log: both spawns, the one-shot result (S1), then the settlement notice (M2).
    let log = c.wait_log(
        &root,
        Duration::from_secs(20),
        "the settlement of the continuable child",
        |l| !accepted(l, "subagent-settled", Some(&cont_id)).is_empty(),
    );
    let spawned = of_kind(&log, "subagent/spawned");
    assert_eq!(spawned.len(), 2, "{}", render_log(&log));
    assert!(spawned
        .iter()
        .any(|e| e.data["child"] == cont_id.as_str() && e.data["node"] == "node-2"));
    assert!(spawned
        .iter()
        .any(|e| e.data["child"] == once_id.as_str() && e.data["node"] == "node-3"));
    let results = of_kind(&log, "subagent/result");
    assert_eq!(results.len(), 1, "{}", render_log(&log));
    assert_eq!(results[0].data["child"], once_id.as_str());
    assert_eq!(results[0].data["result"]["output"], "one-shot result");
    assert_eq!(results[0].data["result"]["stop_reason"], "completed");

    // The children's logs: descriptor (P1), policy snapshot (C3), their turn.
    let clog = c.log(&cont_id);
    let kinds: Vec<&str> = clog.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds.first(),
        Some(&"subagent/descriptor"),
        "{}",
        render_log(&clog)
    );
    assert_eq!(clog[0].data["mode"], "continuable");
    assert!(
        kinds.contains(&"turn/start") && kinds.contains(&"outbox/settled"),
        "{}",
        render_log(&clog)
    );
    assert!(clog
        .iter()
        .any(|e| e.kind == "turn/assistant" && e.data["text"] == "dug it"));
    let olog = c.log(&once_id);
    let desc = of_kind(&olog, "subagent/descriptor");
    assert_eq!(desc.len(), 1, "{}", render_log(&olog));
    assert_eq!(desc[0].data["mode"], "one-shot");
    let first_turn = olog.iter().position(|e| e.kind == "turn/start").unwrap();
    let desc_at = olog
        .iter()
        .position(|e| e.kind == "subagent/descriptor")
        .unwrap();
    assert!(
        first_turn < desc_at,
        "one-shot descriptor comes at the first pre-step: {}",
        render_log(&olog)
    );

    // A one-shot spawned through the CLI returns its result once settled and disposed (S1).
    let reply = c.spawn(&[
        "--parent",
        &root,
        "--shape",
        "one-shot",
        "--node",
        "node-2",
        "--prompt",
        "echo me",
        "--script",
        r#"{"turns":[[{"do":"echo"}]]}"#,
    ]);
    assert_eq!(reply["depth"], 1, "{reply}");
    assert_eq!(reply["node"], "node-2", "{reply}");
    assert_eq!(reply["result"]["output"], "echo me", "{reply}");
    assert_eq!(reply["result"]["stop_reason"], "completed", "{reply}");
    let row = c.row(&root, &id_of(&reply["session"]));
    assert_eq!(row["state"], "disposed", "{row}");

    // A continuable child spawned through the CLI on node-3 is live with the root as durable
    // parent; the root lives on node-1, so its runtime owner is none (R2).
    let reply = c.spawn(&[
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--node",
        "node-3",
        "--prompt",
        "wait",
        "--script",
        r#"{"turns":[[{"do":"sleep","ms":30000}]]}"#,
    ]);
    let live = id_of(&reply["session"]);
    let row = c.row(&root, &live);
    assert_eq!(
        (
            row["state"].as_str(),
            row["node"].as_str(),
            row["live"].as_bool()
        ),
        (Some("running"), Some("node-3"), Some(true)),
        "{row}"
    );
    assert_eq!(row["owner"], json!(null), "{row}");
}
