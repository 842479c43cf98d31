//! Golden wire JSON of every control body (N3): the bytes a client and a node exchange. Each
//! body is pinned both ways: serializing the value gives exactly the text, and the text parses
//! back to the value. A change to a field name, order, default or omission fails here.

use std::collections::BTreeMap;

use lineage_core::authority::InterruptAuthority;
use lineage_core::descriptor::SubagentShape;
use lineage_core::header::SessionHeader;
use lineage_core::ids::{DrainId, NodeId, RequestId, RunId, SessionId};
use lineage_core::messages::StopReason;
use lineage_core::policy::{DelegatedPolicyOverrides, ParentPolicyView};
use lineage_protocol::birth::BirthKind;
use lineage_protocol::control::*;
use lineage_protocol::envelope::{
    decode_request, decode_routed_request, encode_reply, ControlError, ErrorCode, Hop,
    FORWARDED_HEADER,
};
use lineage_protocol::{AgentSpec, ProfileDriver, ProfileInfo, Script};
use serde::de::DeserializeOwned;
use serde::Serialize;

const A: &str = "01936c1e-7a3b-7cde-8f00-000000000001";
const B: &str = "01936c1e-7a3b-7cde-8f00-000000000002";
const R: &str = "01936c1e-7a3b-7cde-8f00-0000000000a1";

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).unwrap()
}

fn node(s: &str) -> NodeId {
    NodeId::parse(s).unwrap()
}

#[track_caller]
fn pin<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T, golden: &str) {
    assert_eq!(serde_json::to_string(value).unwrap(), golden);
    assert_eq!(&serde_json::from_str::<T>(golden).unwrap(), value);
}

fn echo_agent() -> AgentSpec {
    AgentSpec::Script {
        script: Script::echo(),
    }
}

#[test]
fn n3_spawn_request_is_pinned_and_has_no_routing_field() {
    let minimal = SpawnRequest::new(echo_agent(), "");
    pin(
        &minimal,
        r#"{"parent":null,"shape":null,"agent":{"driver":"script","script":{"turns":[],"after":{"do":"echo"}}},"prompt":"","node":null,"label":null,"persona":null,"tool_filter":null,"max_depth":null,"request_id":null,"cwd":null,"preset":null,"policy":null}"#,
    );
    let full = SpawnRequest {
        parent: Some(sid(A)),
        shape: Some(SubagentShape::OneShot),
        agent: AgentSpec::Profile {
            profile: "coder".into(),
        },
        prompt: "go".into(),
        node: Some(node("node-2")),
        label: Some("leaf".into()),
        persona: Some("terse".into()),
        tool_filter: Some(vec!["read".into()]),
        max_depth: Some(lineage_core::depth::MaxDepth::from_u32(3)),
        request_id: Some(RequestId::parse(R).unwrap()),
        cwd: None,
        preset: None,
        policy: Some(ParentPolicyView {
            sandbox_override: None,
            has_approval_service: true,
        }),
        timeout_ms: Some(lineage_core::deadline::Timeout::named("timeout_ms", 30_000).unwrap()),
        budget: None,
        idle_ttl_ms: None,
        wake_on: None,
        workspace: Some(lineage_protocol::workspace::SpawnWorkspace::Inherit),
        mcp_servers: Vec::new(),
    };
    pin(
        &full,
        &format!(
            r#"{{"parent":"{A}","shape":"one-shot","agent":{{"driver":"profile","profile":"coder"}},"prompt":"go","node":"node-2","label":"leaf","persona":"terse","tool_filter":["read"],"max_depth":3,"request_id":"{R}","cwd":null,"preset":null,"policy":{{"has_approval_service":true}},"timeout_ms":30000,"workspace":"inherit"}}"#
        ),
    );
    // A root's idle TTL, in ms; 0 is refused where the request is read.
    let root = SpawnRequest {
        idle_ttl_ms: Some(lineage_core::idle::IdleTtl::named("idle_ttl_ms", 600_000).unwrap()),
        ..SpawnRequest::new(
            AgentSpec::Profile {
                profile: "coder".into(),
            },
            "hi",
        )
    };
    let text = serde_json::to_string(&root).unwrap();
    assert!(text.ends_with(r#""idle_ttl_ms":600000}"#), "{text}");
    assert_eq!(serde_json::from_str::<SpawnRequest>(&text).unwrap(), root);
    let zero = serde_json::from_str::<SpawnRequest>(
        r#"{"agent":{"driver":"profile","profile":"coder"},"idle_ttl_ms":0}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(zero.contains("idle_ttl_ms 0 ms is out of range"), "{zero}");
    // What a client writes least: only the agent.
    let short: SpawnRequest =
        serde_json::from_str(r#"{"agent":{"driver":"acp","command":["a","--stdio"]}}"#).unwrap();
    assert_eq!(
        short.agent,
        AgentSpec::Acp {
            command: vec!["a".into(), "--stdio".into()]
        }
    );
}

#[test]
fn n3_spawn_and_start_replies_are_pinned() {
    let run = RunId::parse(B).unwrap();
    pin(
        &SpawnReply {
            session: sid(A),
            run: None,
            node: node("node-1"),
            depth: 0,
            result: None,
        },
        &format!(r#"{{"session":"{A}","run":null,"node":"node-1","depth":0}}"#),
    );
    pin(
        &SpawnReply {
            session: sid(A),
            run: Some(run),
            node: node("node-3"),
            depth: 2,
            result: Some(OneShotResult {
                output: Some("42".into()),
                structured: None,
                stop_reason: StopReason::Completed,
                changes: None,
            }),
        },
        &format!(
            r#"{{"session":"{A}","run":"{B}","node":"node-3","depth":2,"result":{{"output":"42","stop_reason":"completed"}}}}"#
        ),
    );
    // Issue 39: a child with files says where its changes are.
    pin(
        &OneShotResult {
            output: None,
            structured: None,
            stop_reason: StopReason::Completed,
            changes: Some(Box::new(lineage_core::workspace::WorkspaceChanges::new(
                lineage_core::workspace::WorkspaceSnapshot::whole(
                    format!("{B}.base"),
                    "SHA-256=b".into(),
                ),
                lineage_core::workspace::WorkspaceSnapshot {
                    object: format!("{B}.tip-1"),
                    digest: "SHA-256=t".into(),
                    changed: Some(1),
                },
            ))),
        },
        &format!(
            r#"{{"output":null,"stop_reason":"completed","changes":{{"base":{{"object":"{B}.base","digest":"SHA-256=b"}},"latest":{{"object":"{B}.tip-1","digest":"SHA-256=t","changed":1}},"changed":1}}}}"#
        ),
    );
}

#[test]
fn n3_start_request_is_pinned() {
    let top_level = StartRequest {
        request_id: RequestId::parse(R).unwrap(),
        header: SessionHeader::top_level(sid(A), Some("/w".into()), None),
        agent: echo_agent(),
        prompt: "hi".into(),
        limits: Default::default(),
        kind: BirthKind::TopLevel {
            policy: Default::default(),
            idle_ttl_ms: None,
            wake_on: None,
            mcp_servers: Vec::new(),
        },
        workspace: None,
    };
    pin(
        &top_level,
        &format!(
            r#"{{"request_id":"{R}","header":{{"id":"{A}","root_session":"{A}","cwd":"/w"}},"agent":{{"driver":"script","script":{{"turns":[],"after":{{"do":"echo"}}}}}},"prompt":"hi","limits":{{}},"kind":{{"kind":"top_level","policy":{{"has_approval_service":false}}}}}}"#
        ),
    );
    let parent = SessionHeader::top_level(sid(A), None, None);
    let child = StartRequest {
        request_id: RequestId::parse(R).unwrap(),
        header: lineage_core::header::child_session_meta(&parent, sid(B), 1, 0, None).unwrap(),
        agent: echo_agent(),
        prompt: "go".into(),
        limits: lineage_core::limits::BirthLimits {
            max_depth: Some(lineage_core::depth::MaxDepth::from_u32(3)),
            ..Default::default()
        },
        kind: BirthKind::Child {
            descriptor: lineage_core::descriptor::SubagentDescriptor {
                provider: "script".into(),
                label: None,
                mode: lineage_core::descriptor::SubagentShape::OneShot,
                tool_filter: None,
                persona: None,
            },
            run: lineage_core::ids::RunId::parse(B).unwrap(),
            policy: DelegatedPolicyOverrides::default(),
            parent_node: node("node-1"),
        },
        workspace: Some(lineage_core::workspace::WorkspaceSnapshot {
            object: format!("{B}.base"),
            digest: "SHA-256=x".into(),
            changed: None,
        }),
    };
    pin(
        &child,
        &format!(
            r#"{{"request_id":"{R}","header":{{"id":"{B}","parent_session":"{A}","root_session":"{A}","origin":"subagent","delegation_depth":1}},"agent":{{"driver":"script","script":{{"turns":[],"after":{{"do":"echo"}}}}}},"prompt":"go","limits":{{"max_depth":3}},"kind":{{"kind":"child","descriptor":{{"provider":"script","mode":"one-shot"}},"run":"{B}","policy":{{}},"parent_node":"node-1"}},"workspace":{{"object":"{B}.base","digest":"SHA-256=x"}}}}"#
        ),
    );
    assert!(child.check_kind().is_ok() && top_level.check_kind().is_ok());
    // Issue 39: a birth starts only from its own files (its base, or its spawn's upload).
    assert!(child.check_workspace().is_ok());
    let upload = StartRequest {
        workspace: Some(lineage_core::workspace::WorkspaceSnapshot {
            object: lineage_core::workspace::upload_object(&child.request_id),
            digest: "SHA-256=x".into(),
            changed: None,
        }),
        ..child.clone()
    };
    assert!(upload.check_workspace().is_ok());
    let stolen = StartRequest {
        workspace: Some(lineage_core::workspace::WorkspaceSnapshot {
            object: format!("{A}.tip-1"),
            digest: "SHA-256=x".into(),
            changed: None,
        }),
        ..child.clone()
    };
    let line = stolen.check_workspace().unwrap_err();
    assert!(
        line.contains(&format!("{A}.tip-1")) && !line.contains('\n'),
        "{line}"
    );
    let orphan = StartRequest {
        header: SessionHeader::top_level(sid(B), None, None),
        ..child
    };
    let refused = orphan.check_kind().unwrap_err();
    assert!(refused.contains("names no parent"), "{refused}");
}

#[test]
fn m3_followup_bodies_are_pinned() {
    let without = FollowupRequest {
        session: sid(A),
        content: "more".into(),
        request_id: None,
    };
    pin(
        &without,
        &format!(r#"{{"session":"{A}","content":"more"}}"#),
    );
    let with = FollowupRequest {
        request_id: Some(RequestId::parse(R).unwrap()),
        ..without
    };
    pin(
        &with,
        &format!(r#"{{"session":"{A}","content":"more","request_id":"{R}"}}"#),
    );
    for (outcome, word) in [
        (FollowupOutcome::Delivered, "delivered"),
        (
            FollowupOutcome::ResumedAndDelivered,
            "resumed_and_delivered",
        ),
        (FollowupOutcome::AlreadyDelivered, "already_delivered"),
    ] {
        pin(
            &FollowupReply {
                session: sid(A),
                node: node("node-2"),
                outcome,
            },
            &format!(r#"{{"session":"{A}","node":"node-2","outcome":"{word}"}}"#),
        );
    }
}

#[test]
fn m4_interrupt_bodies_are_pinned() {
    pin(
        &InterruptRequest {
            target: sid(B),
            authority: InterruptAuthority::User {
                parent_session_id: sid(A),
            },
        },
        &format!(r#"{{"target":"{B}","authority":{{"kind":"user","parent_session_id":"{A}"}}}}"#),
    );
    pin(
        &InterruptRequest {
            target: sid(B),
            authority: InterruptAuthority::Ancestor { session: sid(A) },
        },
        &format!(r#"{{"target":"{B}","authority":{{"kind":"ancestor","session":"{A}"}}}}"#),
    );
    for (outcome, word, on) in [
        (InterruptOutcome::Cancelled, "cancelled", true),
        (InterruptOutcome::NothingRunning, "nothing_running", true),
        (InterruptOutcome::NotLive, "not_live", false),
    ] {
        let where_ = if on { r#""node-1""# } else { "null" };
        pin(
            &InterruptReply {
                target: sid(B),
                node: on.then(|| node("node-1")),
                outcome,
            },
            &format!(r#"{{"target":"{B}","node":{where_},"outcome":"{word}"}}"#),
        );
    }
}

#[test]
fn x1_drain_bodies_are_pinned() {
    pin(
        &DrainRequest {
            roots: vec![sid(A)],
            progress: Some(DrainId::parse("d-1").unwrap()),
        },
        &format!(r#"{{"roots":["{A}"],"progress":"d-1"}}"#),
    );
    let mut by_node = BTreeMap::new();
    by_node.insert(node("node-2"), 1);
    let report = DrainReport {
        closed: vec![sid(A), sid(B)],
        closed_count: 2,
        waves: vec![
            vec![Disposal {
                session: sid(B),
                node: Some(node("node-2")),
                kind: DisposalKind::Released,
            }],
            vec![Disposal {
                session: sid(A),
                node: None,
                kind: DisposalKind::RegistryOnly,
            }],
        ],
        summary: vec![
            WaveSummary {
                counts: DisposalCounts {
                    released: 1,
                    registry_only: 0,
                    already_disposed: 0,
                },
                by_node,
            },
            WaveSummary {
                counts: DisposalCounts {
                    released: 0,
                    registry_only: 1,
                    already_disposed: 0,
                },
                by_node: BTreeMap::new(),
            },
        ],
        totals: DisposalCounts {
            released: 1,
            registry_only: 1,
            already_disposed: 0,
        },
        truncated: false,
        warnings: vec!["node-9 did not answer".into()],
    };
    pin(
        &report,
        &format!(
            concat!(
                r#"{{"closed":["{A}","{B}"],"closed_count":2,"#,
                r#""waves":[[{{"session":"{B}","node":"node-2","kind":"released"}}],[{{"session":"{A}","node":null,"kind":"registry_only"}}]],"#,
                r#""summary":[{{"counts":{{"released":1,"registry_only":0,"already_disposed":0}},"by_node":{{"node-2":1}}}},{{"counts":{{"released":0,"registry_only":1,"already_disposed":0}},"by_node":{{}}}}],"#,
                r#""totals":{{"released":1,"registry_only":1,"already_disposed":0}},"truncated":false,"warnings":["node-9 did not answer"]}}"#
            ),
            A = A,
            B = B
        ),
    );
    assert_eq!(report.disposed(), 2);
    assert_eq!(report.listed(), 2);
}

#[test]
fn k1_resume_bodies_are_pinned() {
    pin(
        &ResumeRequest { session: sid(A) },
        &format!(r#"{{"session":"{A}"}}"#),
    );
    pin(
        &ResumeReply {
            session: sid(A),
            node: node("node-3"),
            outcome: ResumeOutcome::Resumed,
            epoch: 4,
        },
        &format!(r#"{{"session":"{A}","node":"node-3","outcome":"resumed","epoch":4}}"#),
    );
    assert_eq!(
        serde_json::to_string(&ResumeOutcome::AlreadyLive).unwrap(),
        r#""already_live""#
    );
}

#[test]
fn n3_status_agents_stop_bodies_are_pinned() {
    pin(&StatusRequest {}, "{}");
    pin(&AgentsRequest {}, "{}");
    pin(
        &StatusReply {
            node: node("node-1"),
            cluster: "dev".into(),
            live: vec![LiveAgent {
                session: sid(B),
                parent: Some(sid(A)),
                owner: None,
                shape: Some(SubagentShape::Continuable),
                depth: 1,
                in_turn: true,
            }],
        },
        &format!(
            r#"{{"node":"node-1","cluster":"dev","live":[{{"session":"{B}","parent":"{A}","owner":null,"shape":"continuable","depth":1,"in_turn":true}}]}}"#
        ),
    );
    // A node from before `in_turn` (issue 37) reads as idle.
    let older: StatusReply = serde_json::from_str(&format!(
        r#"{{"node":"node-1","cluster":"dev","live":[{{"session":"{B}","parent":null,"owner":null,"shape":null,"depth":0}}]}}"#
    ))
    .unwrap();
    assert!(!older.live[0].in_turn);
    pin(
        &AgentsReply {
            node: Some(node("node-1")),
            allow_raw_commands: false,
            profiles: vec![ProfileInfo {
                name: "coder".into(),
                driver: ProfileDriver::Acp,
                tools: true,
                description: "an ACP coder".into(),
                a2a: false,
            }],
        },
        r#"{"node":"node-1","allow_raw_commands":false,"profiles":[{"name":"coder","driver":"acp","tools":true,"description":"an ACP coder"}]}"#,
    );
    pin(
        &StopRequest {
            sessions: vec![sid(A)],
            reason: None,
        },
        &format!(r#"{{"sessions":["{A}"]}}"#),
    );
    pin(
        &StopReply {
            done: vec![sid(A)],
            not_live: vec![sid(B)],
        },
        &format!(r#"{{"done":["{A}"],"not_live":["{B}"]}}"#),
    );
}

#[test]
fn n3_envelopes_are_pinned() {
    let ok: Result<ResumeRequest, ControlError> = Ok(ResumeRequest { session: sid(A) });
    assert_eq!(
        String::from_utf8(encode_reply(&ok)).unwrap(),
        format!(r#"{{"v":1,"result":{{"session":"{A}"}}}}"#)
    );
    for (code, word) in [
        (ErrorCode::BadRequest, "bad_request"),
        (ErrorCode::NotFound, "not_found"),
        (ErrorCode::Refused, "refused"),
        (ErrorCode::Unavailable, "unavailable"),
        (ErrorCode::Internal, "internal"),
    ] {
        let err: Result<(), ControlError> = Err(ControlError::new(code, "why"));
        assert_eq!(
            String::from_utf8(encode_reply(&err)).unwrap(),
            format!(r#"{{"v":1,"error":{{"code":"{word}","message":"why"}}}}"#)
        );
    }
    assert_eq!(FORWARDED_HEADER, "Lineage-Forwarded");
}

#[test]
fn n3_routing_is_a_header_and_a_legacy_forwarded_field_is_dropped() {
    let body = format!(r#"{{"session":"{A}","content":"x"}}"#);
    let (r, hop) =
        decode_routed_request::<FollowupRequest>("followup", body.as_bytes(), Hop::Client).unwrap();
    assert_eq!((r.content.as_str(), hop), ("x", Hop::Client));
    let (_, hop) =
        decode_routed_request::<FollowupRequest>("followup", body.as_bytes(), Hop::Forwarded)
            .unwrap();
    assert_eq!(hop, Hop::Forwarded);
    // An older client always sent `"forwarded":false`: accepted, nothing changes.
    let old_client = format!(r#"{{"session":"{A}","content":"x","forwarded":false}}"#);
    let (r, hop) =
        decode_routed_request::<FollowupRequest>("followup", old_client.as_bytes(), Hop::Client)
            .unwrap();
    assert_eq!((r.session, hop), (sid(A), Hop::Client));
    // An older node forwarding said so in the body: it still counts as forwarded.
    let old_node = format!(
        r#"{{"target":"{B}","authority":{{"kind":"ancestor","session":"{A}"}},"forwarded":true}}"#
    );
    let (_, hop) =
        decode_routed_request::<InterruptRequest>("interrupt", old_node.as_bytes(), Hop::Client)
            .unwrap();
    assert_eq!(hop, Hop::Forwarded);
    // Not a boolean: one clear line.
    let bad = format!(r#"{{"session":"{A}","content":"x","forwarded":"yes"}}"#);
    let err = decode_routed_request::<FollowupRequest>("followup", bad.as_bytes(), Hop::Client)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::BadRequest);
    assert!(
        err.message.contains("Lineage-Forwarded header"),
        "{}",
        err.message
    );
    // The plain decoder (per-node ops) still refuses the field: it is not part of any body.
    let err = decode_request::<FollowupRequest>("followup", old_client.as_bytes()).unwrap_err();
    assert!(
        err.message.contains("unknown field `forwarded`"),
        "{}",
        err.message
    );
    // A prompt that merely mentions the word is not the field.
    let prompt = format!(r#"{{"session":"{A}","content":"\"forwarded\": yes"}}"#);
    let (r, hop) =
        decode_routed_request::<FollowupRequest>("followup", prompt.as_bytes(), Hop::Client)
            .unwrap();
    assert_eq!(
        (r.content.as_str(), hop),
        (r#""forwarded": yes"#, Hop::Client)
    );
    // Header values: only `1` means forwarded.
    assert_eq!(Hop::from_header(Some("1")), Hop::Forwarded);
    assert_eq!(Hop::from_header(Some("0")), Hop::Client);
    assert_eq!(Hop::from_header(None), Hop::Client);
}

#[test]
fn o3_every_control_op_has_a_description_natscli_shows_whole() {
    use lineage_protocol::control::ops;
    for op in ops::CLUSTER.iter().chain(ops::NODE.iter()) {
        let d = ops::description(op);
        assert_ne!(d, ops::description("no-such-op"), "{op} has no description");
        assert!(d.len() < 60, "{op}: {d:?} is cut by nats micro info");
    }
}
