//! Property tests of depth monotonicity (D2) and header validation (L2).

use lineage_core::depth::{delegation_depth_of, MAX_SAFE_INTEGER};
use lineage_core::header::{child_session_meta, AgentPreset, PromptSection, SessionHeader};
use lineage_core::ids::SessionId;
use proptest::prelude::*;
use serde_json::{json, Value};

/// UUID text from 128 random bits: a valid session id.
fn uuid_text(bits: u128) -> String {
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn session_id() -> impl Strategy<Value = SessionId> {
    any::<u128>().prop_map(|bits| SessionId::parse(&uuid_text(bits)).unwrap())
}

/// A depth, biased towards the small values real trees have.
fn child_depth() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..8, 1u64..=MAX_SAFE_INTEGER, Just(MAX_SAFE_INTEGER)]
}

fn header_depth() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), child_depth()]
}

fn preset() -> impl Strategy<Value = AgentPreset> {
    let section = (any::<String>(), any::<i64>(), any::<String>())
        .prop_map(|(name, order, text)| PromptSection { name, order, text });
    (
        any::<String>(),
        prop::collection::vec(any::<String>(), 0..4),
        prop::collection::vec(section, 0..3),
    )
        .prop_map(|(name, tools, prompt_sections)| AgentPreset {
            name,
            tools,
            prompt_sections,
        })
}

/// Any valid child header: a child of a top-level session or a grandchild.
fn child_header() -> impl Strategy<Value = SessionHeader> {
    (
        session_id(),
        session_id(),
        prop::option::of(session_id()),
        child_depth(),
        prop_oneof![Just(0u64), 1u64..100, 0u64..=MAX_SAFE_INTEGER],
        prop::option::of(any::<String>()),
        prop::option::of(preset()),
    )
        .prop_filter_map(
            "ids must be distinct",
            |(root, child, middle, depth, seed, cwd, preset)| {
                let top = SessionHeader::top_level(root.clone(), cwd, None);
                let parent = match middle {
                    Some(middle) if middle != root && middle != child => {
                        child_session_meta(&top, middle, 1, 0, None).ok()?
                    }
                    Some(_) => return None,
                    None => top,
                };
                if child == root || Some(&child) == parent.parent_session() {
                    return None;
                }
                child_session_meta(&parent, child, depth, seed, preset).ok()
            },
        )
}

/// A header whose depth is `depth`: top level for 0, a child otherwise.
fn header_with_depth(root: SessionId, child: SessionId, depth: u64) -> SessionHeader {
    let top = SessionHeader::top_level(root, None, None);
    if depth == 0 {
        top
    } else {
        child_session_meta(&top, child, depth, 0, None).unwrap()
    }
}

/// Any JSON value that is not a non-negative safe integer, grouped as the spec lists them.
fn bad_depth() -> impl Strategy<Value = Value> {
    prop_oneof![
        // negative
        (i64::MIN..0).prop_map(|n| json!(n)),
        (-1e300f64..-0.5).prop_map(|f| json!(f)),
        // fractional
        any::<f64>()
            .prop_filter("finite and fractional", |f| f.is_finite()
                && f.fract() != 0.0)
            .prop_map(|f| json!(f)),
        // a string, even one that spells a number
        any::<String>().prop_map(|s| json!(s)),
        any::<u64>().prop_map(|n| json!(n.to_string())),
        // larger than 2^53-1
        ((MAX_SAFE_INTEGER + 1)..=u64::MAX).prop_map(|n| json!(n)),
        (9.007_199_254_740_992e15f64..1e300).prop_map(|f| json!(f)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn d2_depth_never_drops_below_the_header(
        root in session_id(),
        child in session_id(),
        depth in header_depth(),
        runtime in prop::option::of(prop_oneof![0u64..8, any::<u64>()]),
    ) {
        prop_assume!(root != child);
        let header = header_with_depth(root, child, depth);
        let resolved = delegation_depth_of(&header, runtime);
        prop_assert!(resolved >= depth);
        prop_assert_eq!(resolved, depth.max(runtime.unwrap_or(0)));
        if let Some(r) = runtime {
            prop_assert!(resolved >= r, "an override can raise the depth");
        }
    }

    #[test]
    fn d2_resumed_child_never_drops_depth_or_becomes_top_level(
        root in session_id(),
        child in session_id(),
        depth in child_depth(),
        runtime in prop::option::of(prop_oneof![Just(0u64), 0u64..8, any::<u64>()]),
    ) {
        prop_assume!(root != child);
        let born = header_with_depth(root, child, depth);
        let stored = serde_json::to_vec(&born).unwrap();
        let resumed: SessionHeader = serde_json::from_slice(&stored).unwrap();
        let resolved = delegation_depth_of(&resumed, runtime);
        prop_assert!(resolved >= depth);
        prop_assert!(resolved >= 1, "a resumed child never becomes top level");
        prop_assert!(resumed.is_subagent());
        prop_assert_eq!(resumed.delegation_depth(), Some(depth));
    }

    #[test]
    fn l2_valid_child_header_round_trips_unchanged(header in child_header()) {
        let text = serde_json::to_string(&header).unwrap();
        let back: SessionHeader = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&back, &header);
        prop_assert_eq!(serde_json::to_string(&back).unwrap(), text);
        let value = serde_json::to_value(&header).unwrap();
        prop_assert_eq!(serde_json::from_value::<SessionHeader>(value).unwrap(), header);
    }

    #[test]
    fn l2_origin_other_than_subagent_is_refused(
        header in child_header(),
        origin in prop_oneof![
            any::<String>().prop_filter("not subagent", |s| s != "subagent").prop_map(Value::from),
            Just(json!("Subagent")),
            Just(json!("subagent ")),
            Just(json!("fork")),
            any::<i64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
        ],
    ) {
        let mut value = serde_json::to_value(&header).unwrap();
        value["origin"] = origin.clone();
        let err = serde_json::from_value::<SessionHeader>(value)
            .expect_err("a mutated origin must be refused")
            .to_string();
        prop_assert!(err.contains("origin"), "origin={}: {}", origin, err);
        prop_assert!(!err.contains('\n'), "{}", err);
    }

    #[test]
    fn l2_delegation_depth_that_is_not_a_safe_integer_is_refused(
        header in child_header(),
        depth in bad_depth(),
    ) {
        let mut value = serde_json::to_value(&header).unwrap();
        value["delegation_depth"] = depth.clone();
        let err = serde_json::from_value::<SessionHeader>(value.clone())
            .expect_err("a mutated delegation_depth must be refused")
            .to_string();
        prop_assert!(err.contains("delegation_depth"), "depth={}: {}", depth, err);
        // Through text as well, as the store reads it.
        prop_assert!(serde_json::from_str::<SessionHeader>(&value.to_string()).is_err());
    }
}
