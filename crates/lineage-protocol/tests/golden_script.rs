//! The scripted agent's language, pinned (H1): its JSON form, the older spellings it still
//! reads, and what it refuses (moved out of `golden.rs`, which holds the control bodies).

use lineage_core::descriptor::SubagentShape;
use lineage_core::messages::Delivery;
use lineage_protocol::{AfterScript, Script, Step};
use serde::de::DeserializeOwned;
use serde::Serialize;

fn pin<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T, golden: &str) {
    assert_eq!(serde_json::to_string(value).unwrap(), golden);
    assert_eq!(&serde_json::from_str::<T>(golden).unwrap(), value);
}

#[test]
fn h1_script_language_is_pinned() {
    let script = Script {
        turns: vec![vec![
            Step::Reply {
                content: "hi".into(),
            },
            Step::Echo,
            Step::Report {
                content: "r".into(),
                delivery: Delivery::Wakeup,
            },
            Step::Spawn {
                shape: SubagentShape::OneShot,
                agent: None,
                prompt: "p".into(),
                node: None,
                label: None,
                persona: None,
                tool_filter: None,
                timeout_ms: None,
                workspace: None,
                wait: true,
            },
            Step::WaitChildren,
            Step::Sleep { ms: 5 },
            Step::Fail { reason: "x".into() },
        ]],
        after: AfterScript::RepeatLast,
    };
    pin(
        &script,
        concat!(
            r#"{"turns":[[{"do":"reply","content":"hi"},{"do":"echo"},{"do":"report","content":"r","delivery":"wakeup"},"#,
            r#"{"do":"spawn","shape":"one-shot","agent":null,"prompt":"p","node":null,"label":null,"persona":null,"tool_filter":null},"#,
            r#"{"do":"wait_children"},{"do":"sleep","ms":5},{"do":"fail","reason":"x"}]],"after":{"do":"repeat_last"}}"#
        ),
    );
    assert_eq!(
        Script::from_json(r#"{"turns":[[{"do":"report","content":"q"}]]}"#).unwrap(),
        Script {
            turns: vec![vec![Step::Report {
                content: "q".into(),
                delivery: Delivery::Quiet
            }]],
            after: AfterScript::Reply {
                content: "done".into()
            },
        }
    );
    // A spawn step that does not wait for its answer says so; one that waits says nothing.
    let Step::Spawn { wait, .. } =
        &Script::from_json(r#"{"turns":[[{"do":"spawn","shape":"one-shot","await":false}]]}"#)
            .unwrap()
            .turns[0][0]
    else {
        panic!("a spawn step")
    };
    assert!(!wait);
    // Issue 39: a spawn step names its child's files, inherit or empty.
    let Step::Spawn { workspace, .. } = &Script::from_json(
        r#"{"turns":[[{"do":"spawn","shape":"one-shot","workspace":"empty"}]]}"#,
    )
    .unwrap()
    .turns[0][0] else {
        panic!("a spawn step")
    };
    assert_eq!(
        workspace,
        &Some(lineage_protocol::workspace::SpawnWorkspace::Empty)
    );
    let err =
        Script::from_json(r#"{"turns":[[{"do":"spawn","shape":"one-shot","workspace":"mine"}]]}"#)
            .unwrap_err();
    assert!(
        err.to_string().contains("`mine`") && err.to_string().contains("`inherit`"),
        "{err}"
    );
    // Issue 15 (O1): `reply` says `content` like `report` and `followup`; the older `text`
    // still reads (the CLI warns).
    assert_eq!(
        Script::from_json(r#"{"turns":[[{"do":"reply","text":"hi"}]]}"#).unwrap(),
        Script::from_json(r#"{"turns":[[{"do":"reply","content":"hi"}]]}"#).unwrap()
    );
    let err = Script::from_json(r#"{"turns":[],"bogus":1}"#).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("malformed script: unknown field `bogus`"),
        "{err}"
    );
}
