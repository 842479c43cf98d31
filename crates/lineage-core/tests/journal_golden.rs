//! Golden tests of the typed journal: each kind's JSON is byte-identical to what the host wrote
//! with `json!` before the journal was typed (the expressions below are the old writers', so the
//! comparison holds whatever key order serde_json is built with), and reads back to the same
//! event. Logs written by older nodes stay readable.

use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{NodeId, RunId};
use lineage_core::journal::{Accepted, JournalEvent, TurnMessage};
use lineage_core::messages::{Delivery, StopReason};
use serde_json::json;

use lineage_core::ids::sid;

fn check(event: JournalEvent, kind: &str, old: serde_json::Value) {
    let (k, data) = event.to_parts();
    assert_eq!(k, kind);
    assert_eq!(
        serde_json::to_string(&data).unwrap(),
        serde_json::to_string(&old).unwrap(),
        "{kind}"
    );
    assert_eq!(
        JournalEvent::from_parts(kind, &old),
        Ok(Some(event)),
        "{kind}"
    );
}

#[test]
fn x2_every_journal_kind_keeps_its_old_bytes() {
    let child = sid(3);
    let run = RunId::parse("01936c1e-7a3b-7cde-8f00-000000000009").unwrap();
    check(
        JournalEvent::TurnStart {
            index: 2,
            inputs: vec![4, 5],
        },
        "turn/start",
        json!({"index": 2, "inputs": [4, 5]}),
    );
    // Newer than the typed journal (H1: a turn that waited for its children): pinned as it is.
    check(
        JournalEvent::TurnInputs {
            index: 2,
            inputs: vec![7, 9],
        },
        "turn/inputs",
        json!({"index": 2, "inputs": [7, 9]}),
    );
    check(
        JournalEvent::TurnUser { text: "hi".into() },
        "turn/user",
        json!({"text": "hi"}),
    );
    check(
        JournalEvent::TurnAssistant { text: "yo".into() },
        "turn/assistant",
        json!({"text": "yo"}),
    );
    check(
        JournalEvent::TurnEnd {
            index: 2,
            stop_reason: StopReason::Completed,
            error: None,
        },
        "turn/end",
        json!({"index": 2, "stop_reason": "completed"}),
    );
    let mut failed = json!({"index": 3, "stop_reason": "failed"});
    failed["error"] = json!("boom");
    check(
        JournalEvent::TurnEnd {
            index: 3,
            stop_reason: StopReason::Failed,
            error: Some("boom".into()),
        },
        "turn/end",
        failed,
    );
    check(
        JournalEvent::ReportSent {
            seq: 1,
            content: "half".into(),
            delivery: Delivery::Wakeup,
        },
        "outbox/report",
        json!({"seq": 1, "content": "half", "delivery": "wakeup"}),
    );
    check(
        JournalEvent::SettledSent {
            seq: 2,
            stop_reason: StopReason::Disposed,
            summary: "worker disposed".into(),
        },
        "outbox/settled",
        json!({"seq": 2, "stop_reason": "disposed", "summary": "worker disposed"}),
    );
    check(
        JournalEvent::Spawned {
            child: child.clone(),
            shape: SubagentShape::OneShot,
            node: NodeId::parse("node-2").unwrap(),
            run: Some(run.clone()),
            call: None,
        },
        "subagent/spawned",
        json!({"child": child, "shape": "one-shot", "node": "node-2", "run": run}),
    );
    check(
        JournalEvent::Spawned {
            child: child.clone(),
            shape: SubagentShape::Continuable,
            node: NodeId::parse("node-2").unwrap(),
            run: Some(run.clone()),
            call: Some("cbf29ce484222325".into()),
        },
        "subagent/spawned",
        json!({"child": child, "shape": "continuable", "node": "node-2", "run": run, "call": "cbf29ce484222325"}),
    );
    let result = json!({"output": "42", "structured": null, "stop_reason": "completed"});
    check(
        JournalEvent::ChildResult {
            child: child.clone(),
            result: result.clone(),
        },
        "subagent/result",
        json!({"child": child, "result": result}),
    );
    check(
        JournalEvent::SpawnRefused { error: "no".into() },
        "subagent/spawn-refused",
        json!({"error": "no"}),
    );
    check(
        JournalEvent::WorkspaceSnapshot(lineage_core::workspace::WorkspaceSnapshot {
            object: "s.tip-1".into(),
            digest: "SHA-256=abc".into(),
            changed: None,
        }),
        "workspace/snapshot",
        json!({"object": "s.tip-1", "digest": "SHA-256=abc"}),
    );
    check(
        JournalEvent::WorkspaceSnapshot(lineage_core::workspace::WorkspaceSnapshot {
            object: "s.tip-0".into(),
            digest: "SHA-256=def".into(),
            changed: Some(3),
        }),
        "workspace/snapshot",
        json!({"object": "s.tip-0", "digest": "SHA-256=def", "changed": 3}),
    );
}

#[test]
fn m1_m3_accepted_messages_keep_their_old_bytes_and_a_request_id_is_added_only_when_present() {
    // The old writer serialized this struct shape: {message, wake, dedup_id}.
    let report = Accepted {
        message: TurnMessage::SubagentReport {
            sender_session_id: sid(3),
            content: "r".into(),
        },
        wake: false,
        dedup_id: Some(format!("{}-1", sid(3))),
        request_id: None,
    };
    let old = json!({
        "message": {"kind": "subagent-report", "sender_session_id": sid(3), "content": "r"},
        "wake": false,
        "dedup_id": format!("{}-1", sid(3)),
    });
    check(JournalEvent::Accepted(report), "inbox/accepted", old);
    let followup = Accepted {
        message: TurnMessage::User {
            content: "go".into(),
        },
        wake: true,
        dedup_id: None,
        request_id: Some("req-1".into()),
    };
    check(
        JournalEvent::Accepted(followup),
        "inbox/accepted",
        json!({"message": {"kind": "user", "content": "go"}, "wake": true, "dedup_id": null, "request_id": "req-1"}),
    );
    // A log written before request ids existed reads back with none.
    let old_followup = json!({"message": {"kind": "user", "content": "go"}, "wake": true});
    match JournalEvent::from_parts("inbox/accepted", &old_followup) {
        Ok(Some(JournalEvent::Accepted(a))) => {
            assert_eq!(a.dedup_id, None);
            assert_eq!(a.request_id, None);
        }
        other => panic!("{other:?}"),
    }
}
