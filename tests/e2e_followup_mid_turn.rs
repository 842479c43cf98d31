//! Issue 10, fault 1, as a user meets it (M3): `lineage send` to a child in the middle of a
//! 12 s turn, on another node, with a 3 s client timeout. On the old shape the send timed out
//! (exit 5, "no reply") yet the message was accepted once the turn ended, and a retry after the
//! timeout was accepted too, so the text arrived twice. Now the message is accepted and
//! answered while the turn runs, and a retry with the same request id is recognised.

use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::json;

const T: Duration = Duration::from_secs(40);

#[test]
fn m3_send_to_a_child_mid_turn_is_answered_at_once_and_a_retry_is_accepted_once() {
    let c = Cluster::start(3);
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "ready"}]], "after": {"do": "echo"}}),
    );
    let reply = c.spawn(&[
        "--parent", &root, "--shape", "continuable", "--node", "node-2", "--prompt", "first",
        "--script", r#"{"turns":[[{"do":"sleep","ms":12000},{"do":"reply","text":"first done"}]],"after":{"do":"echo"}}"#,
    ]);
    let kid = id_of(&reply["session"]);
    c.wait_log(&kid, T, "the first turn to start", |l| {
        !of_kind(l, "turn/start").is_empty()
    });
    let send = |timeout: &str| {
        c.cli(&[
            "--json",
            "--timeout-ms",
            timeout,
            "send",
            "--request-id",
            "send-mid-turn-1",
            &kid,
            "second",
        ])
    };
    let (code, out, err) = send("3000");
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let sent: serde_json::Value = serde_json::from_str(&out).expect("json reply");
    assert_eq!(sent["outcome"], "delivered", "{sent}");
    assert_eq!(sent["node"], "node-2", "{sent}");
    // Answered while the 12 s turn still runs: its end is not in the log yet.
    let log = c.log(&kid);
    assert!(of_kind(&log, "turn/end").is_empty(), "{}", render_log(&log));
    assert_eq!(
        accepted(&log, "user", None).len(),
        2,
        "{}",
        render_log(&log)
    );
    // The user retries (as after a timeout): recognised by its request id, nothing added.
    let (code, out, err) = send("3000");
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let again: serde_json::Value = serde_json::from_str(&out).expect("json reply");
    assert_eq!(again["outcome"], "already_delivered", "{again}");
    let log = c.wait_log(&kid, T, "the followup's turn", |l| {
        l.iter()
            .any(|e| e.kind == "turn/assistant" && e.data["text"] == "second")
    });
    let read = log
        .iter()
        .filter(|e| e.kind == "turn/user" && e.data["text"] == "second")
        .count();
    assert_eq!(read, 1, "{}", render_log(&log));
    let with_id = log
        .iter()
        .filter(|e| e.kind == "inbox/accepted" && e.data["request_id"] == "send-mid-turn-1")
        .count();
    assert_eq!(with_id, 1, "accepted once: {}", render_log(&log));
}

/// Issue 12, `lineage chaos` seed 23 (M3, K1): a followup that cold-resumed a continuable child
/// and was answered too late is retried by its sender with the same request id. The child had
/// taken that message and settled again meanwhile. The retry resumed it once more (a new run,
/// the session `running`), found the message a duplicate, and left the resumed run with nothing
/// to take: the child stayed `running` for good. Now the resume reads the request id in the
/// log and wakes nothing: the retry is answered `already_delivered` and the child stays settled.
#[test]
fn m3_k1_a_retried_followup_to_a_child_that_settled_again_does_not_resume_it() {
    let c = Cluster::start(3);
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
        "node-2",
        "--prompt",
        "first",
        "--script",
        r#"{"turns":[[{"do":"reply","text":"first done"}]],"after":{"do":"echo"}}"#,
    ]);
    let kid = id_of(&reply["session"]);
    c.wait_state(&root, &kid, "settled", T);
    let send = || {
        c.cli(&[
            "--json",
            "send",
            "--request-id",
            "m3-cold-retry-1",
            &kid,
            "more work",
        ])
    };
    // Cold: resumed, given the message, settled again.
    let (code, out, err) = send();
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let sent: serde_json::Value = serde_json::from_str(&out).expect("json reply");
    assert_eq!(sent["outcome"], "resumed_and_delivered", "{sent}");
    c.wait_log(&kid, T, "the followup's turn to settle", |l| {
        of_kind(l, "outbox/settled").len() == 2
    });
    c.wait_state(&root, &kid, "settled", T);
    let before = c.log(&kid);
    let epoch = c.row(&root, &kid)["epoch"].clone();

    // The retry of the same send (its answer was lost, say): recognised, nothing wakes.
    let (code, out, err) = send();
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let again: serde_json::Value = serde_json::from_str(&out).expect("json reply");
    assert_eq!(again["outcome"], "already_delivered", "{again}");
    // Before the fix the row turned `running` at once and stayed so.
    std::thread::sleep(Duration::from_secs(2));
    let row = c.row(&root, &kid);
    assert_eq!(row["state"], "settled", "{row}");
    assert_eq!(row["epoch"], epoch, "no new claim: {row}");
    let after = c.log(&kid);
    assert_eq!(after.len(), before.len(), "{}", render_log(&after));
    assert_eq!(
        accepted(&after, "user", None).len(),
        2,
        "{}",
        render_log(&after)
    );
}
