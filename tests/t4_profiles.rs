//! T4: a node runs only the agent profiles its operator configured. A command line from the
//! wire (the `nats req ... {"driver":"acp","command":["sh","-c","id > proof.txt"]}` of the
//! safe-deploy issue) is refused through every surface and changes nothing; an unknown
//! profile is refused naming the known ones; a profile runs exactly its configured program.

use std::time::Duration;

use lineage_testkit::prelude::Cluster;
use serde_json::json;

/// The session count the registry holds, by state.
fn session_total(cluster: &Cluster) -> u64 {
    let status = cluster.cli_json(&["status"]);
    status["sessions"]
        .as_object()
        .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0)
}

#[test]
fn t4_raw_command_lines_from_the_wire_are_refused_and_change_nothing() {
    let cluster = Cluster::start_with_toml(
        3,
        &[],
        "[agents.echo-agent]\ndriver = \"script\"\ndescription = \"echoes its prompt\"\n",
    );
    let proof = cluster.path().join("proof.txt");
    let before = session_total(&cluster);
    let cmd = format!("id > {}", proof.display());

    // The service, as `nats req` would send it: top level and under a parent, each node.
    for node in ["node-1", "node-2", "node-3"] {
        let body = json!({
            "agent": {"driver": "acp", "command": ["sh", "-c", cmd]},
            "prompt": "go",
            "node": node,
        });
        let reply = cluster.ctl("spawn", body.to_string().as_bytes());
        let error = &reply["error"];
        assert_eq!(error["code"], "bad_request", "{reply}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("raw agent command lines are refused")
                && message.contains("agents.allow_raw_commands")
                && message.contains("echo-agent"),
            "{message}"
        );
        assert!(!message.contains('\n'), "one line: {message}");
    }
    // The CLI's --acp: exit 2, one line.
    let (code, _, err) = cluster.cli(&["spawn", "--acp", &format!("sh -c {cmd}")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("agents.allow_raw_commands"), "{err}");
    // A child asked for by a scripted parent: its spawn step is refused inside the turn.
    let root = cluster.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "spawn", "shape": "one-shot", "node": "node-2",
            "agent": {"driver": "acp", "command": ["sh", "-c", cmd]}, "prompt": "x"}]]}),
    );
    std::thread::sleep(Duration::from_secs(2));
    let tree = cluster.tree(&root);
    assert_eq!(tree.len(), 1, "no child was registered: {tree:?}");

    std::thread::sleep(Duration::from_millis(500));
    assert!(!proof.exists(), "the command ran: {}", proof.display());
    assert_eq!(
        session_total(&cluster),
        before + 1,
        "only the scripted root was registered"
    );

    // An unknown profile: refused, naming the known ones, nothing registered.
    let (code, _, err) = cluster.cli(&["spawn", "--profile", "claude", "--node", "node-3"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("unknown agent profile \"claude\"")
            && err.contains("echo-agent, script")
            && err.contains("lineage agents"),
        "{err}"
    );
    assert_eq!(session_total(&cluster), before + 1);

    // `lineage agents` lists each node's profiles (names only, no command lines).
    let agents = cluster.cli_json(&["agents"]);
    let nodes = agents.as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{agents}");
    for node in nodes {
        assert_eq!(node["allow_raw_commands"], false, "{node}");
        let names: Vec<&str> = node["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["echo-agent", "script"], "{node}");
    }

    // A profile runs what the operator configured: here the scripted echo agent, on node-2.
    let reply = cluster.spawn(&[
        "--profile",
        "echo-agent",
        "--node",
        "node-2",
        "--prompt",
        "ping",
    ]);
    assert_eq!(reply["node"], "node-2", "{reply}");
    let session = lineage_testkit::prelude::id_of(&reply["session"]);
    lineage_testkit::wait_for(Duration::from_secs(20), "the echo reply", || {
        cluster
            .log(&session)
            .iter()
            .any(|e| e.kind == "turn/assistant" && e.data.to_string().contains("ping"))
            .then_some(())
    });
    // A request cannot pick the working directory outside the node's.
    let body =
        json!({"agent": {"driver": "profile", "profile": "echo-agent"}, "prompt": "x", "cwd": "/"});
    let reply = cluster.ctl("spawn", body.to_string().as_bytes());
    assert_eq!(reply["error"]["code"], "bad_request", "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cwd \"/\" is refused"),
        "{reply}"
    );
}
