//! Spans as the OpenTelemetry SDK exports them (O2, U2; issue 36): hosts on the in-memory twins
//! with the `tracing-opentelemetry` layer over an SDK tracer provider whose exporter keeps the
//! spans in memory. A scripted root reports usage and spawns a child; the
//! tree is one trace, each turn an `invoke_agent` span in the pinned GenAI conventions, and the
//! child's spans hang under the turn that spawned it.

// The GenAI names are deprecated in the crate only because they moved to their own repository
// (semantic-conventions-genai); the names are the same.
#![allow(deprecated)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use opentelemetry_semantic_conventions::attribute as semconv;
use tracing_subscriber::layer::SubscriberExt;

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn text(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

/// The spans from `span` up to its trace's root, by parent id.
fn ancestry<'a>(spans: &'a [SpanData], span: &'a SpanData) -> Vec<&'a SpanData> {
    let by_id: HashMap<SpanId, &SpanData> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect();
    let mut chain = vec![span];
    let mut at = span;
    while let Some(parent) = by_id.get(&at.parent_span_id) {
        chain.push(parent);
        at = parent;
        assert!(chain.len() < 64, "a cycle in the parent links");
    }
    chain
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn o2_u2_a_tree_is_one_trace_of_invoke_agent_spans() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("lineage")));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    // The pinned names are the conventions' (the crate's experimental attributes).
    assert_eq!(
        lineage_host::telemetry::genai::ATTRIBUTES,
        [
            semconv::GEN_AI_OPERATION_NAME,
            semconv::GEN_AI_AGENT_NAME,
            semconv::GEN_AI_CONVERSATION_ID,
            semconv::GEN_AI_USAGE_INPUT_TOKENS,
        ]
    );
    assert!(opentelemetry_semantic_conventions::SCHEMA_URL
        .ends_with(lineage_host::telemetry::genai::SEMCONV_VERSION));

    let cluster = MemCluster::start();
    let a = cluster.host("node-a").await;
    let root = scripted_root(
        &a,
        r#"{"turns": [[
                {"do": "usage", "tokens": 1234},
                {"do": "spawn", "shape": "continuable", "prompt": "look", "label": "scout",
                 "agent": {"driver": "script", "script": {"turns": [[
                    {"do": "reply", "text": "found it"}]]}}},
                {"do": "await_children", "timeout_ms": 15000},
                {"do": "reply", "text": "done"}
            ]]}"#,
    )
    .await;
    let child_turn = |spans: &[SpanData]| {
        spans
            .iter()
            .find(|s| {
                s.name.starts_with("invoke_agent")
                    && text(s, "gen_ai.conversation.id").is_some_and(|c| c != root.to_string())
            })
            .cloned()
    };
    wait_for_async(
        Duration::from_secs(20),
        "the root's and the child's turn spans",
        || async {
            let spans = exporter.get_finished_spans().unwrap();
            let root_done = spans.iter().any(|s| {
                s.name.starts_with("invoke_agent")
                    && text(s, "gen_ai.conversation.id") == Some(root.to_string())
            });
            if root_done && child_turn(&spans).is_some() {
                Ok(())
            } else {
                let seen: Vec<String> = spans
                    .iter()
                    .map(|s| format!("{} {:?}", s.name, text(s, "session")))
                    .collect();
                Err(format!("finished spans: {seen:?}"))
            }
        },
    )
    .await;
    let spans = exporter.get_finished_spans().unwrap();

    let root_turn = spans
        .iter()
        .find(|s| text(s, "gen_ai.conversation.id") == Some(root.to_string()))
        .unwrap();
    assert_eq!(root_turn.name, "invoke_agent script");
    assert_eq!(
        root_turn.span_kind,
        opentelemetry::trace::SpanKind::Internal
    );
    assert_eq!(
        text(root_turn, semconv::GEN_AI_OPERATION_NAME).as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        text(root_turn, semconv::GEN_AI_AGENT_NAME).as_deref(),
        Some("script")
    );
    assert_eq!(
        attr(root_turn, semconv::GEN_AI_USAGE_INPUT_TOKENS),
        Some(&Value::I64(1234)),
        "{root_turn:#?}"
    );

    // The child's turn: same trace, and up its parents the spawn that the root's turn made.
    let child = child_turn(&spans).unwrap();
    assert_eq!(
        child.span_context.trace_id(),
        root_turn.span_context.trace_id(),
        "one trace per tree"
    );
    let chain = ancestry(&spans, &child);
    let names: Vec<&str> = chain.iter().map(|s| s.name.as_ref()).collect();
    let at = chain
        .iter()
        .position(|s| s.span_context.span_id() == root_turn.span_context.span_id())
        .unwrap_or_else(|| panic!("the root's turn is not above the child's: {names:?}"));
    assert_eq!(
        names[..at],
        ["invoke_agent script", "spawn"],
        "the child's turn hangs under the spawn its parent's turn made (on one node a spawn \
         starts the child itself; across nodes a `start` comes between, see \
         tests/u2_traces_collector.rs)"
    );
    let spawn = chain.iter().find(|s| s.name == "spawn").unwrap();
    assert_eq!(text(spawn, "parent"), Some(root.to_string()), "{spawn:#?}");
    provider.shutdown().ok();
}
