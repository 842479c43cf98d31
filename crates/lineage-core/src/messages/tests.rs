//! Unit tests of the payloads: round trips, golden bytes, strict decoding.

use super::*;
use serde_json::json;

const CHILD: &str = "01936c1e-7a3b-7cde-8f00-000000000002";
const PARENT: &str = "01936c1e-7a3b-7cde-8f00-000000000001";
const RUN: &str = "01936c1e-7a3b-7cde-8f00-0000000000aa";

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).unwrap()
}

fn report() -> SubagentReport {
    SubagentReport {
        sender_session_id: sid(CHILD),
        parent_session_id: sid(PARENT),
        seq: 3,
        content: "halfway".into(),
        delivery: Delivery::Quiet,
        at_ms: 1,
    }
}

fn start() -> SubagentRunInfo {
    SubagentRunInfo {
        run_id: RunId::parse(RUN).unwrap(),
        provider: "scripted".into(),
        child_id: sid(CHILD),
        parent_session_id: sid(PARENT),
        local: true,
        shape: SubagentShape::OneShot,
        node: NodeId::parse("node-1").unwrap(),
        at_ms: 5,
    }
}

fn report_json() -> serde_json::Value {
    serde_json::from_slice(&report().encode()).unwrap()
}

fn decode_err(bytes: &[u8]) -> CoreError {
    SubagentReport::decode(bytes).unwrap_err()
}

#[test]
fn n3_report_form_notice_is_refused() {
    let mut v = report_json();
    v["form"] = json!("notice");
    let err = decode_err(v.to_string().as_bytes());
    assert!(matches!(
        err,
        CoreError::InvalidPayload {
            what: "subagent-report",
            ..
        }
    ));
    assert!(
        err.to_string()
            .contains(r#"form must be "relay", got "notice""#),
        "{err}"
    );
}

#[test]
fn n3_wrong_kind_is_refused() {
    let mut v = report_json();
    v["kind"] = json!("subagent-settled");
    let err = decode_err(v.to_string().as_bytes()).to_string();
    assert!(err.contains("kind must be"), "{err}");
    v["kind"] = json!(7);
    assert!(SubagentReport::decode(v.to_string().as_bytes()).is_err());
}

#[test]
fn n3_version_other_than_one_is_unsupported() {
    for found in [0u64, 2, 99] {
        let mut v = report_json();
        v["v"] = json!(found);
        assert_eq!(
            decode_err(v.to_string().as_bytes()),
            CoreError::UnsupportedVersion {
                what: "subagent-report",
                found,
                supported: 1
            }
        );
        let err = InboxMessage::decode(v.to_string().as_bytes()).unwrap_err();
        assert!(matches!(err, CoreError::UnsupportedVersion { found: f, .. } if f == found));
    }
    // The version is checked before anything else, even a shape v1 would refuse.
    let err = LifecycleEvent::decode(br#"{"v":2,"event":"subagent/paused"}"#).unwrap_err();
    assert!(matches!(
        err,
        CoreError::UnsupportedVersion { found: 2, .. }
    ));
}

#[test]
fn n3_missing_or_malformed_version_is_invalid() {
    for (text, expect) in [
        (r#"{"kind":"subagent-report"}"#, "missing field `v`"),
        (r#"{"v":"1"}"#, "v must be a non-negative integer"),
        (r#"{"v":-1}"#, "v must be a non-negative integer"),
        (r#"{"v":1.5}"#, "v must be a non-negative integer"),
        ("[1]", "expected a JSON object"),
        ("not json", "expected ident"),
        ("", "EOF"),
    ] {
        let err = decode_err(text.as_bytes());
        assert!(
            matches!(err, CoreError::InvalidPayload { .. }),
            "{text}: {err}"
        );
        let msg = err.to_string();
        assert!(msg.contains(expect), "{text}: {msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }
}

#[test]
fn n3_missing_fields_and_bad_ids_are_invalid_payloads() {
    let mut v = report_json();
    v.as_object_mut().unwrap().remove("seq");
    let msg = decode_err(v.to_string().as_bytes()).to_string();
    assert!(msg.contains("missing field `seq`"), "{msg}");
    let mut v = report_json();
    v["sender_session_id"] = json!("a.b\nc");
    let msg = decode_err(v.to_string().as_bytes()).to_string();
    assert!(msg.contains("session id") && !msg.contains('\n'), "{msg}");
    let mut v = report_json();
    v["delivery"] = json!("loud");
    assert!(decode_err(v.to_string().as_bytes())
        .to_string()
        .contains("unknown variant"));
}

#[test]
fn n3_unknown_extra_fields_are_ignored_within_v1() {
    let mut v = report_json();
    v["priority"] = json!("high");
    assert_eq!(
        SubagentReport::decode(v.to_string().as_bytes()).unwrap(),
        report()
    );
}

#[test]
fn m2_settled_summary_is_one_line() {
    let m = SubagentSettled::new(
        sid(CHILD),
        sid(PARENT),
        4,
        "done\nwith\r\n\tstyle\u{2028}ok",
        StopReason::Completed,
        None,
        9,
    );
    assert_eq!(m.summary.as_str(), "done with style ok");
    let mut v: serde_json::Value = serde_json::from_slice(&m.encode()).unwrap();
    v["summary"] = json!("two\nlines");
    let err = SubagentSettled::decode(v.to_string().as_bytes())
        .unwrap_err()
        .to_string();
    assert!(err.contains("summary must be one line"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn m1_inbox_message_dispatches_on_kind_and_dedups_on_sender_and_seq() {
    let r = InboxMessage::from(report());
    let back = InboxMessage::decode(&r.encode()).unwrap();
    assert_eq!(back, r);
    assert_eq!(back.dedup_id(), format!("{CHILD}-3"));
    assert_eq!(report().dedup_id(), back.dedup_id());
    assert_eq!(back.sender_session_id(), &sid(CHILD));
    assert_eq!(back.parent_session_id(), &sid(PARENT));
    assert_eq!((back.seq(), back.at_ms()), (3, 1));

    let s = InboxMessage::from(SubagentSettled::new(
        sid(CHILD),
        sid(PARENT),
        4,
        "x",
        StopReason::Failed,
        Some("boom".into()),
        2,
    ));
    let back = InboxMessage::decode(&s.encode()).unwrap();
    assert!(matches!(back, InboxMessage::Settled(_)));
    assert_eq!(back.dedup_id(), format!("{CHILD}-4"));

    let mut v = report_json();
    v["kind"] = json!("subagent-gossip");
    let err = InboxMessage::decode(v.to_string().as_bytes())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("inbox message") && err.contains("subagent-gossip"),
        "{err}"
    );
    v.as_object_mut().unwrap().remove("kind");
    let err = InboxMessage::decode(v.to_string().as_bytes())
        .unwrap_err()
        .to_string();
    assert!(err.contains("got nothing"), "{err}");
}

#[test]
fn m1_inbox_message_serde_matches_encode_decode() {
    let r = InboxMessage::from(report());
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(text.as_bytes(), &r.encode()[..]);
    assert_eq!(serde_json::from_str::<InboxMessage>(&text).unwrap(), r);
    let mut v = report_json();
    v["form"] = json!("notice");
    assert!(serde_json::from_value::<InboxMessage>(v).is_err());
}

#[test]
fn e1_end_pairs_with_start_by_run_id() {
    let s = start();
    let e = s.ended(StopReason::Completed, Some("done".into()), 9);
    assert_eq!(e.run_id, s.run_id);
    assert_eq!(
        (e.child_id.clone(), e.parent_session_id.clone()),
        (s.child_id.clone(), s.parent_session_id.clone())
    );
    let start_ev = LifecycleEvent::decode(&s.encode()).unwrap();
    let end_ev = LifecycleEvent::decode(&e.encode()).unwrap();
    assert!(matches!(start_ev, LifecycleEvent::Start(_)));
    assert!(matches!(end_ev, LifecycleEvent::End(_)));
    assert_eq!(start_ev.run_id(), end_ev.run_id());
    assert_eq!(start_ev.child_id(), end_ev.child_id());
    assert_eq!(start_ev.parent_session_id(), &sid(PARENT));
    assert_eq!(LifecycleEvent::from(e.clone()), end_ev);
    let mut v: serde_json::Value = serde_json::from_slice(&e.encode()).unwrap();
    v["event"] = json!("subagent/start");
    assert!(SubagentRunEndInfo::decode(v.to_string().as_bytes()).is_err());
    let err = LifecycleEvent::decode(br#"{"v":1,"event":"subagent/paused"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("lifecycle event") && err.contains("subagent/paused"),
        "{err}"
    );
}

#[test]
fn m2_settlement_summary_is_one_line_and_bounded() {
    assert_eq!(
        settlement_summary("reviewer", StopReason::Completed, Some("LGTM\nship it")),
        "subagent reviewer completed: LGTM ship it"
    );
    assert_eq!(
        settlement_summary("reviewer", StopReason::Interrupted, None),
        "subagent reviewer was interrupted"
    );
    assert_eq!(
        settlement_summary("r", StopReason::MaxTurns, Some("  \n ")),
        "subagent r stopped at its turn limit"
    );
    let long = "é".repeat(500);
    let s = settlement_summary("r", StopReason::Failed, Some(&long));
    assert_eq!(s.chars().count(), MAX_SUMMARY_CHARS);
    assert!(s.ends_with('…') && s.starts_with("subagent r failed: éé"));
    assert!(!s.contains('\n'));
    let exact = "x".repeat(MAX_SUMMARY_CHARS - "subagent r failed: ".len());
    let s = settlement_summary("r", StopReason::Failed, Some(&exact));
    assert_eq!(s.chars().count(), MAX_SUMMARY_CHARS);
    assert!(!s.ends_with('…'));
}

#[test]
fn m2_stop_reason_spellings_are_snake_case() {
    for r in StopReason::ALL {
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            format!("\"{}\"", r.as_str())
        );
        assert_eq!(StopReason::parse(r.as_str()), Some(r));
    }
    assert_eq!(StopReason::parse("idle"), Some(StopReason::Idle));
    assert_eq!(StopReason::MaxTurns.as_str(), "max_turns");
    assert_eq!(
        serde_json::to_string(&Delivery::Wakeup).unwrap(),
        "\"wakeup\""
    );
}
