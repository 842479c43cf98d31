//! Golden JSON of the wire contract (M1, M2, E1, N3): the exact bytes of every payload, written
//! out literally. Changing one of these strings is a wire-contract change: bump `v`.

use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{NodeId, RunId, SessionId};
use lineage_core::messages::{
    Delivery, InboxMessage, LifecycleEvent, StopReason, SubagentReport, SubagentRunEndInfo,
    SubagentRunInfo, SubagentSettled,
};

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
        content: "found 2 failing tests".into(),
        delivery: Delivery::Wakeup,
        at_ms: 1_733_000_000_000,
    }
}

fn settled(output: Option<&str>) -> SubagentSettled {
    SubagentSettled::new(
        sid(CHILD),
        sid(PARENT),
        4,
        "subagent reviewer completed: LGTM",
        StopReason::Completed,
        output.map(str::to_owned),
        1_733_000_000_500,
    )
}

fn start() -> SubagentRunInfo {
    SubagentRunInfo {
        run_id: RunId::parse(RUN).unwrap(),
        provider: "scripted".into(),
        child_id: sid(CHILD),
        parent_session_id: sid(PARENT),
        local: false,
        shape: SubagentShape::Continuable,
        node: NodeId::parse("node-2").unwrap(),
        at_ms: 1_733_000_000_100,
    }
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

#[test]
fn m1_report_golden_json() {
    let golden = r#"{"v":1,"kind":"subagent-report","form":"relay","sender_session_id":"01936c1e-7a3b-7cde-8f00-000000000002","parent_session_id":"01936c1e-7a3b-7cde-8f00-000000000001","seq":3,"content":"found 2 failing tests","delivery":"wakeup","at_ms":1733000000000}"#;
    assert_eq!(text(report().encode()), golden);
    assert_eq!(SubagentReport::decode(golden.as_bytes()).unwrap(), report());
    let quiet = SubagentReport {
        delivery: Delivery::Quiet,
        ..report()
    };
    assert!(text(quiet.encode()).contains(r#""delivery":"quiet""#));
}

#[test]
fn m2_settled_golden_json() {
    let golden = r#"{"v":1,"kind":"subagent-settled","form":"notice","sender_session_id":"01936c1e-7a3b-7cde-8f00-000000000002","parent_session_id":"01936c1e-7a3b-7cde-8f00-000000000001","seq":4,"summary":"subagent reviewer completed: LGTM","stop_reason":"completed","output":"LGTM","at_ms":1733000000500}"#;
    let m = settled(Some("LGTM"));
    assert_eq!(text(m.encode()), golden);
    assert_eq!(SubagentSettled::decode(golden.as_bytes()).unwrap(), m);

    let no_output = r#"{"v":1,"kind":"subagent-settled","form":"notice","sender_session_id":"01936c1e-7a3b-7cde-8f00-000000000002","parent_session_id":"01936c1e-7a3b-7cde-8f00-000000000001","seq":4,"summary":"subagent reviewer completed: LGTM","stop_reason":"completed","at_ms":1733000000500}"#;
    assert_eq!(text(settled(None).encode()), no_output);
    assert_eq!(
        SubagentSettled::decode(no_output.as_bytes()).unwrap(),
        settled(None)
    );
    let explicit_null = no_output.replace(r#""at_ms""#, r#""output":null,"at_ms""#);
    assert_eq!(
        SubagentSettled::decode(explicit_null.as_bytes()).unwrap(),
        settled(None)
    );
}

#[test]
fn e1_start_golden_json() {
    let golden = r#"{"v":1,"event":"subagent/start","run_id":"01936c1e-7a3b-7cde-8f00-0000000000aa","provider":"scripted","child_id":"01936c1e-7a3b-7cde-8f00-000000000002","parent_session_id":"01936c1e-7a3b-7cde-8f00-000000000001","local":false,"shape":"continuable","node":"node-2","at_ms":1733000000100}"#;
    assert_eq!(text(start().encode()), golden);
    assert_eq!(SubagentRunInfo::decode(golden.as_bytes()).unwrap(), start());
}

#[test]
fn e1_end_golden_json() {
    let golden = r#"{"v":1,"event":"subagent/end","run_id":"01936c1e-7a3b-7cde-8f00-0000000000aa","provider":"scripted","child_id":"01936c1e-7a3b-7cde-8f00-000000000002","parent_session_id":"01936c1e-7a3b-7cde-8f00-000000000001","local":false,"shape":"continuable","node":"node-2","stop_reason":"max_turns","last_assistant_message":"I ran out of turns.","at_ms":1733000000900}"#;
    let end = start().ended(
        StopReason::MaxTurns,
        Some("I ran out of turns.".into()),
        1_733_000_000_900,
    );
    assert_eq!(text(end.encode()), golden);
    assert_eq!(SubagentRunEndInfo::decode(golden.as_bytes()).unwrap(), end);

    let bare = r#"{"v":1,"event":"subagent/end","run_id":"01936c1e-7a3b-7cde-8f00-0000000000aa","provider":"scripted","child_id":"01936c1e-7a3b-7cde-8f00-000000000002","parent_session_id":"01936c1e-7a3b-7cde-8f00-000000000001","local":false,"shape":"continuable","node":"node-2","stop_reason":"disposed","at_ms":7}"#;
    assert_eq!(
        text(start().ended(StopReason::Disposed, None, 7).encode()),
        bare
    );
}

#[test]
fn n3_enums_encode_exactly_like_their_payloads() {
    let inbox = InboxMessage::from(report());
    assert_eq!(inbox.encode(), report().encode());
    let settled_inbox = InboxMessage::from(settled(None));
    assert_eq!(settled_inbox.encode(), settled(None).encode());
    let lifecycle = LifecycleEvent::from(start());
    assert_eq!(lifecycle.encode(), start().encode());
    assert_eq!(
        LifecycleEvent::decode(&start().encode()).unwrap(),
        lifecycle
    );
}

#[test]
fn n3_a_report_cannot_be_decoded_as_a_settlement_or_the_reverse() {
    assert!(SubagentSettled::decode(&report().encode()).is_err());
    assert!(SubagentReport::decode(&settled(None).encode()).is_err());
    assert!(SubagentRunInfo::decode(&report().encode()).is_err());
    assert!(SubagentRunEndInfo::decode(&start().encode()).is_err());
    assert!(InboxMessage::decode(&start().encode()).is_err());
    assert!(LifecycleEvent::decode(&report().encode()).is_err());
}
