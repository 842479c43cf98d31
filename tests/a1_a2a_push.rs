//! A2A push notifications (issue 38, A1), set up with the official Python `a2a-sdk`
//! (tests/a2a/client.py) at `lineage a2a`, received by a webhook this test serves: each state
//! change of a task is POSTed once, in order, with the config's token and credentials, while
//! the node hosting the task dies and the gateway the config was set at dies. A bad config is
//! one line and stores nothing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lineage_testkit::binary::lineage_bin;
use lineage_testkit::free_port;
use lineage_testkit::prelude::Cluster;
use serde_json::Value;

mod a2a;
use a2a::{ok, python_a2a_installed, refused, sent_task, Gateway, TOKEN};

fn profiles() -> String {
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    format!(
        "[agents.helper]\ndriver = \"acp\"\ncommand = \"{agent}\"\na2a = true\ndescription = \"echoes what it is told\"\n",
        agent = agent.display()
    )
}

/// One POST the webhook received: its headers (lower-case names) and JSON body.
#[derive(Debug, Clone)]
struct Received {
    headers: Vec<(String, String)>,
    body: Value,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn state(&self) -> &str {
        self.body["statusUpdate"]["status"]["state"]
            .as_str()
            .unwrap_or_default()
    }

    fn id(&self) -> &str {
        self.body["statusUpdate"]["metadata"]["lineage"]["notification"]
            .as_str()
            .unwrap_or_default()
    }
}

/// A webhook on 127.0.0.1 answering 200 to every POST and keeping what it got.
fn webhook() -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut headers = Vec::new();
            let mut line = String::new();
            let _ = reader.read_line(&mut line); // request line
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((n, v)) = line.trim_end().split_once(':') {
                    headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
                }
            }
            let len: usize = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
            keep.lock().unwrap().push(Received { headers, body });
            let mut stream = stream;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (url, got)
}

/// What the webhook got for `task` until `last` arrived (60 s at most).
fn until(got: &Arc<Mutex<Vec<Received>>>, task: &str, last: &str) -> Vec<Received> {
    let began = Instant::now();
    loop {
        let now: Vec<Received> = got
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.body["statusUpdate"]["taskId"] == task)
            .cloned()
            .collect();
        if now.iter().any(|r| r.state() == last) {
            return now;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "no {last} push for {task}; got {now:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a1_each_state_change_is_pushed_once_across_a_node_and_a_gateway_loss() {
    python_a2a_installed();
    let mut c = Cluster::start_with_toml(
        3,
        &[("LINEAGE_LEASE__TAKEOVER_AFTER_MS", "500")],
        &profiles(),
    );
    let private = ["--push-allow-private"];
    let a = Gateway::start_with(&c, free_port().unwrap(), &private);
    let b = Gateway::start_with(&c, free_port().unwrap(), &private);
    let (hook, got) = webhook();

    // A task after its first turn; a push config set at gateway a, read at b.
    let first = ok(&["send", &a.url("helper"), TOKEN, "hello"]);
    let id = sent_task(&first)["id"].as_str().unwrap().to_owned();
    let set = ok(&[
        "push-set",
        &a.url("helper"),
        TOKEN,
        &id,
        &hook,
        "--id",
        "hook-1",
        "--push-token",
        "tok-1",
        "--bearer",
        "hook-secret",
    ]);
    assert_eq!(set["config"]["id"], "hook-1", "{set}");
    let read = ok(&["push-get", &b.url("helper"), TOKEN, &id, "hook-1"]);
    assert_eq!(read["config"]["url"], hook.as_str(), "{read}");
    let listed = ok(&["push-list", &b.url("helper"), TOKEN, &id]);
    assert_eq!(listed["list"]["configs"].as_array().unwrap().len(), 1);

    // Bad configs: one line each, nothing stored. A gateway without --push-allow-private
    // refuses a webhook on this machine.
    let strict = Gateway::start(&c);
    for (url, args, says) in [
        (
            a.url("helper"),
            vec![id.as_str(), "ftp://hooks.example.com/"],
            "not http",
        ),
        (
            a.url("helper"),
            vec![id.as_str(), "http://h.example.com/", "--id", "a.b"],
            "push config id",
        ),
        (
            a.url("helper"),
            vec!["01936c1e-7a3b-7cde-8f00-0000000000aa", hook.as_str()],
            "not found",
        ),
        (
            strict.url("helper"),
            vec![id.as_str(), hook.as_str()],
            "--push-allow-private",
        ),
    ] {
        let mut all = vec!["push-set", url.as_str(), TOKEN];
        all.extend(args);
        let why = refused(&all);
        assert!(why.contains(says) && !why.contains('\n'), "{all:?}: {why}");
    }
    let listed = ok(&["push-list", &b.url("helper"), TOKEN, &id]);
    assert_eq!(listed["list"]["configs"].as_array().unwrap().len(), 1);
    drop(strict);

    // A turn starts; the node hosting the task dies mid-turn; gateway a (where the config was
    // set) dies too. The task resumes elsewhere at the next message, through gateway b.
    ok(&[
        "send",
        &b.url("helper"),
        TOKEN,
        "slow work",
        "--task",
        &id,
        "--now",
    ]);
    let pushed = until(&got, &id, "TASK_STATE_WORKING");
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    let task = ok(&["get", &b.url("helper"), TOKEN, &id]);
    let node = task["task"]["metadata"]["lineage"]["node"]
        .as_str()
        .unwrap()
        .to_owned();
    let index: usize = node.trim_start_matches("node-").parse::<usize>().unwrap() - 1;
    c.nodes[index].kill();
    drop(a);
    let after = ok(&[
        "send",
        &b.url("helper"),
        TOKEN,
        "after the loss",
        "--task",
        &id,
    ]);
    assert_eq!(
        sent_task(&after)["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    ok(&["cancel", &b.url("helper"), TOKEN, &id]);
    let pushed = until(&got, &id, "TASK_STATE_CANCELED");

    // Once per state change, in order: a repeat (a gateway that died between its POST and its
    // record) carries the same notification id, and a receiver drops it.
    let mut seen = std::collections::BTreeSet::new();
    let once: Vec<&Received> = pushed
        .iter()
        .filter(|r| seen.insert(r.id().to_owned()))
        .collect();
    let states: Vec<&str> = once.iter().map(|r| r.state()).collect();
    eprintln!(
        "pushed {} POSTs: {:?}",
        pushed.len(),
        pushed.iter().map(|r| r.id()).collect::<Vec<_>>()
    );
    assert_eq!(
        states,
        [
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_CANCELED"
        ],
        "{pushed:?}"
    );
    for r in &pushed {
        assert_eq!(r.header("a2a-notification-token"), Some("tok-1"), "{r:?}");
        assert_eq!(
            r.header("authorization"),
            Some("Bearer hook-secret"),
            "{r:?}"
        );
        assert_eq!(r.body["statusUpdate"]["contextId"], id.as_str(), "{r:?}");
    }
    // The reply of the last turn rides with its input-required.
    let replied = &once[3].body["statusUpdate"]["status"]["message"]["parts"][0]["text"];
    assert!(
        replied
            .as_str()
            .unwrap_or_default()
            .contains("after the loss"),
        "{:?}",
        once[3]
    );
    // Nothing more after the end; and the config goes when deleted.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(until(&got, &id, "TASK_STATE_CANCELED").len(), pushed.len());
    ok(&["push-delete", &b.url("helper"), TOKEN, &id, "hook-1"]);
    let listed = ok(&["push-list", &b.url("helper"), TOKEN, &id]);
    assert!(
        listed["list"]["configs"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{listed}"
    );
}
