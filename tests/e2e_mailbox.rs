//! End to end, the parent mailbox across nodes: reports (M1), settlement notices (M2, X2),
//! followup (M3). One cluster; the flows use separate roots and do not interfere.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use lineage_core::ids::SessionId;
use lineage_registry::{Consistency, RegistryClient};
use lineage_testkit::prelude::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(25);

/// What the test saw on `lineage.<cluster>.parent.*.inbox`: each payload, with the registry
/// state of its sender read the moment the message arrived.
type Seen = Arc<Mutex<Vec<(Value, Option<String>)>>>;

/// Subscribes to every parent inbox subject; for each settlement notice, asks the registry
/// (linearizable read) for the sender's state as soon as the notice is seen.
fn watch_inboxes(c: &Cluster) -> Seen {
    let seen: Seen = Arc::default();
    let bus = c.bus();
    let client = bus.client.clone();
    let cluster = c.cluster.clone();
    let mut sub = bus
        .rt
        .block_on(client.subscribe(format!("lineage.{cluster}.parent.*.inbox")))
        .expect("subscribe");
    bus.rt.block_on(client.flush()).expect("flush");
    let out = seen.clone();
    bus.rt.spawn(async move {
        let registry = RegistryClient::new(client, cluster);
        while let Some(msg) = sub.next().await {
            let body: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
            let state = if body["kind"] == "subagent-settled" {
                let id = SessionId::parse(body["sender_session_id"].as_str().unwrap_or("")).ok();
                match id {
                    Some(id) => registry
                        .session(id, Consistency::Linearizable)
                        .await
                        .ok()
                        .flatten()
                        .map(|r| r.state.as_str().to_owned()),
                    None => None,
                }
            } else {
                None
            };
            out.lock().unwrap().push((body, state));
        }
    });
    seen
}

#[test]
fn m1_m2_m3_mailbox_across_nodes() {
    let c = Cluster::start(3);
    let seen = watch_inboxes(&c);
    m1_quiet_report_only_queues(&c);
    m1_wakeup_report_starts_a_parent_turn(&c);
    m2_settlement_reaches_a_parent_on_another_node_after_commit(&c, &seen);
    m3_followup_gives_a_continuable_child_new_turns(&c);
}

/// M1 quiet: the report is accepted into the parent's log but starts no turn; the next turn
/// (woken by the child's settlement) reads it.
fn m1_quiet_report_only_queues(c: &Cluster) {
    let child = json!({"turns": [[
        {"do": "report", "content": "q-1", "delivery": "quiet"},
        {"do": "sleep", "ms": 2500},
        {"do": "reply", "text": "child done"}
    ]]});
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[spawn_step("continuable", "node-2", "work", child)]], "after": {"do": "echo"}}),
    );
    let log = c.wait_log(&root, T, "the quiet report", |l| {
        !accepted(l, "subagent-report", None).is_empty()
    });
    let report = accepted(&log, "subagent-report", None)[0].clone();
    let kid = id_of(&report.data["message"]["sender_session_id"]);
    assert_eq!(report.data["wake"], false, "{}", render_log(&log));
    assert_eq!(report.data["message"]["content"], "q-1");
    assert_eq!(report.data["dedup_id"], format!("{kid}-1"));
    // The settlement (2.5 s later) wakes the parent; that one turn reads both.
    let log = c.wait_log(&root, T, "the turn after the settlement", |l| {
        accepted(l, "subagent-settled", Some(&kid))
            .first()
            .is_some_and(|s| !turns_consuming(l, s.seq).is_empty())
    });
    let settled = accepted(&log, "subagent-settled", Some(&kid))[0];
    let turns = turns_consuming(&log, report.seq);
    assert_eq!(turns.len(), 1, "{}", render_log(&log));
    assert_eq!(
        turns[0].seq,
        turns_consuming(&log, settled.seq)[0].seq,
        "{}",
        render_log(&log)
    );
    assert_eq!(of_kind(&log, "turn/start").len(), 2, "{}", render_log(&log));
    // Between the quiet report and the settlement (the child's 2.5 s of work) no turn started.
    let quiet_at = log.iter().position(|e| e.seq == report.seq).unwrap();
    let settled_at = log.iter().position(|e| e.seq == settled.seq).unwrap();
    assert!(
        log[quiet_at..settled_at]
            .iter()
            .all(|e| e.kind != "turn/start"),
        "a quiet report started a turn:\n{}",
        render_log(&log)
    );
    assert!(
        log.iter()
            .any(|e| e.kind == "turn/user" && e.data["text"] == format!("report from {kid}: q-1")),
        "{}",
        render_log(&log)
    );
}

/// M1 wakeup: the report starts a parent turn at once, while the child is still working.
fn m1_wakeup_report_starts_a_parent_turn(c: &Cluster) {
    let child = json!({"turns": [[
        {"do": "report", "content": "w-1", "delivery": "wakeup"},
        {"do": "sleep", "ms": 2500},
        {"do": "reply", "text": "child done"}
    ]]});
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[spawn_step("continuable", "node-3", "work", child)]], "after": {"do": "echo"}}),
    );
    let log = c.wait_log(&root, T, "a turn on the wakeup report", |l| {
        accepted(l, "subagent-report", None)
            .first()
            .is_some_and(|r| !turns_consuming(l, r.seq).is_empty())
    });
    let report = accepted(&log, "subagent-report", None)[0];
    let kid = id_of(&report.data["message"]["sender_session_id"]);
    assert_eq!(report.data["wake"], true);
    let log = c.wait_log(
        &root,
        T,
        "the echo of the report, then the settlement",
        |l| {
            l.iter().any(|e| {
                e.kind == "turn/assistant" && e.data["text"] == format!("report from {kid}: w-1")
            }) && !accepted(l, "subagent-settled", Some(&kid)).is_empty()
        },
    );
    let report = accepted(&log, "subagent-report", Some(&kid))[0];
    let turns = turns_consuming(&log, report.seq);
    assert_eq!(turns.len(), 1, "{}", render_log(&log));
    // The turn ran before the child settled (2.5 s later): the report alone woke it.
    let settled = accepted(&log, "subagent-settled", Some(&kid))[0];
    assert!(
        turns[0].seq < settled.seq,
        "the wakeup turn should come before the settlement:\n{}",
        render_log(&log)
    );
    assert!(turns_consuming(&log, settled.seq)
        .iter()
        .all(|t| t.seq != turns[0].seq));
}

/// M2 across nodes: the parent lives on node-1, the child on node-3. The notice arrives on the
/// parent's inbox subject only after the registry committed `settled`; the parent takes it.
fn m2_settlement_reaches_a_parent_on_another_node_after_commit(c: &Cluster, seen: &Seen) {
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "ready"}]], "after": {"do": "echo"}}),
    );
    let reply = c.spawn(&[
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--node",
        "node-3",
        "--label",
        "summariser",
        "--prompt",
        "summarise",
        "--script",
        r#"{"turns":[[{"do":"sleep","ms":300},{"do":"reply","text":"result-x"}]]}"#,
    ]);
    let kid = id_of(&reply["session"]);
    assert_eq!(reply["node"], "node-3");
    let notice = wait_for(T, "the settlement notice on the inbox subject", || {
        seen.lock()
            .unwrap()
            .iter()
            .find(|(b, _)| {
                b["kind"] == "subagent-settled" && b["sender_session_id"] == kid.as_str()
            })
            .cloned()
    });
    let (body, state_when_seen) = notice;
    assert_eq!(
        state_when_seen.as_deref(),
        Some("settled"),
        "the notice was published before `settled` was committed: {body}"
    );
    assert_eq!(body["v"], 1, "{body}");
    assert_eq!(body["form"], "notice", "{body}");
    assert_eq!(body["parent_session_id"], root.as_str(), "{body}");
    assert_eq!(body["stop_reason"], "completed", "{body}");
    let summary = body["summary"].as_str().expect("summary");
    assert!(
        !summary.contains('\n') && summary.contains("summariser"),
        "{summary}"
    );
    assert_eq!(c.row(&root, &kid)["state"], "settled");
    // The parent on node-1 accepted it and took a turn on it.
    let log = c.wait_log(&root, T, "the settlement turn", |l| {
        accepted(l, "subagent-settled", Some(&kid))
            .first()
            .is_some_and(|s| !turns_consuming(l, s.seq).is_empty())
    });
    assert_eq!(
        accepted(&log, "subagent-settled", Some(&kid)).len(),
        1,
        "{}",
        render_log(&log)
    );
    assert!(log
        .iter()
        .any(|e| e.kind == "turn/user" && e.data["text"] == format!("settled {kid}: {summary}")));
    // Reports travel the same subject, as relays (M1, N3).
    let relay = seen
        .lock()
        .unwrap()
        .iter()
        .find(|(b, _)| b["kind"] == "subagent-report")
        .cloned();
    let (relay, _) = relay.expect("the earlier flows' reports were seen on the inbox subjects");
    assert_eq!(
        (relay["v"].as_u64(), relay["form"].as_str()),
        (Some(1), Some("relay")),
        "{relay}"
    );
}

/// M3: `lineage send` to a live child queues a new turn; to a settled child it cold-resumes it
/// first. Each turn is in the child's log and each settlement reaches the parent.
fn m3_followup_gives_a_continuable_child_new_turns(c: &Cluster) {
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "ready"}]], "after": {"do": "echo"}}),
    );
    let reply = c.spawn(&[
        "--parent", &root, "--shape", "continuable", "--node", "node-2", "--prompt", "first",
        "--script", r#"{"turns":[[{"do":"sleep","ms":3000},{"do":"reply","text":"first done"}]],"after":{"do":"echo"}}"#,
    ]);
    let kid = id_of(&reply["session"]);
    // Live: delivered to node-2 while the first turn sleeps.
    let sent = c.cli_json(&["send", &kid, "second"]);
    assert_eq!(sent["outcome"], "delivered", "{sent}");
    assert_eq!(sent["node"], "node-2", "{sent}");
    let log = c.wait_log(&kid, T, "the second turn", |l| {
        l.iter()
            .any(|e| e.kind == "turn/assistant" && e.data["text"] == "second")
    });
    let starts = of_kind(&log, "turn/start");
    assert_eq!(starts.len(), 2, "{}", render_log(&log));
    assert!(log
        .iter()
        .any(|e| e.kind == "turn/user" && e.data["text"] == "second"));
    c.wait_state(&root, &kid, "settled", T);
    // Cold: settled, so the followup resumes it (new epoch) and it takes a third turn, on its
    // own node (node-2 is healthy) wherever the request landed.
    let sent = c.cli_json(&["send", &kid, "third"]);
    assert_eq!(sent["outcome"], "resumed_and_delivered", "{sent}");
    assert_eq!(sent["node"], "node-2", "resumed where it ran: {sent}");
    let log = c.wait_log(&kid, T, "the third turn", |l| {
        l.iter()
            .any(|e| e.kind == "turn/assistant" && e.data["text"] == "third")
    });
    assert_eq!(of_kind(&log, "turn/start").len(), 3, "{}", render_log(&log));
    assert_eq!(
        log.iter()
            .filter(|e| e.kind == "turn/user" && e.data["text"] == "second")
            .count(),
        1
    );
    let row = wait_for(T, "the child settled again", || {
        let row = c.row(&root, &kid);
        (row["state"] == "settled").then_some(row)
    });
    assert_eq!(row["epoch"], 2, "{row}");
    // Both settlements reached the parent, once each.
    let plog = c.wait_log(&root, T, "two settlements", |l| {
        accepted(l, "subagent-settled", Some(&kid)).len() >= 2
    });
    let ids: Vec<&Value> = accepted(&plog, "subagent-settled", Some(&kid))
        .iter()
        .map(|e| &e.data["dedup_id"])
        .collect();
    assert_eq!(ids.len(), 2, "{}", render_log(&plog));
    assert_ne!(ids[0], ids[1]);
}
