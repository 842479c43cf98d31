//! The delegation tools over MCP (T1–T3, T5), seen by the official Rust SDK's client over an
//! in-memory pipe: the tools and their schemas, each call turned into its turn action with the
//! right data, outcomes as JSON results, refusals and bad arguments as tool errors with one line.
//! The turn is this test's (a `TurnCtx` whose requests the test answers); the host's execution
//! of these actions is tested in `lineage-host/tests/turn_actions.rs`.

use lineage_core::descriptor::SubagentShape;
use lineage_core::journal::TurnMessage;
use lineage_drivers::driver::{ActionOutcome, AgentSpec, TurnAction, TurnCtx, TurnRequest};
use lineage_drivers::tools::{DelegationTools, TurnSlot};
use lineage_protocol::control::OneShotResult;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::RunningService;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use lineage_core::ids::sid;

#[derive(Debug, Clone, Default)]
struct Client;

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }
}

/// A tools server for session 1 in a running turn, and a client connected to it.
async fn connect() -> (
    RunningService<RoleClient, Client>,
    TurnSlot,
    UnboundedReceiver<TurnRequest>,
) {
    connect_filtered(None).await
}

/// [`connect`] for a session whose tool filter is `filter`.
async fn connect_filtered(
    filter: Option<Vec<String>>,
) -> (
    RunningService<RoleClient, Client>,
    TurnSlot,
    UnboundedReceiver<TurnRequest>,
) {
    let (ctx, requests) = TurnCtx::channel();
    let slot = TurnSlot::default();
    slot.set(ctx);
    slot.set_tool_filter(filter);
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let tools = DelegationTools::new(sid(1), slot.clone());
    tokio::spawn(async move {
        if let Ok(running) = tools.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = Client.serve(client_io).await.expect("client connects");
    (client, slot, requests)
}

fn call(name: &str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned()).with_arguments(args.as_object().unwrap().clone())
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// Answers the next action the turn receives with `outcome`, returning the action.
async fn answer_next(
    requests: &mut UnboundedReceiver<TurnRequest>,
    outcome: ActionOutcome,
) -> TurnAction {
    let request = requests.recv().await.expect("an action");
    let _ = request.reply.send(outcome);
    request.action
}

#[tokio::test]
async fn t1_the_tools_are_listed_with_schemas_a_model_can_follow() {
    let (client, _slot, _requests) = connect().await;
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "apply_child_changes",
            "interrupt_child",
            "list_children",
            "report_to_parent",
            "send_to_child",
            "spawn_subagent",
            "wait_for_children"
        ]
    );
    let spawn = tools.iter().find(|t| t.name == "spawn_subagent").unwrap();
    let schema = Value::Object((*spawn.input_schema).clone());
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    required.sort();
    assert_eq!(required, ["profile", "prompt", "shape"], "{schema}");
    let shape = schema.to_string();
    assert!(
        shape.contains("one-shot") && shape.contains("continuable"),
        "{schema}"
    );
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(description.len() > 40, "{}: {description}", tool.name);
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn t1_t2_a_spawn_call_is_the_turns_spawn_and_returns_the_result() {
    let (client, _slot, mut requests) = connect().await;
    let call_task = tokio::spawn({
        let client = client.peer().clone();
        async move {
            client
                .call_tool(call(
                    "spawn_subagent",
                    json!({"profile": "researcher", "prompt": "find x", "shape": "one-shot",
                           "label": "finder", "tool_filter": ["read"]}),
                ))
                .await
        }
    });
    let action = answer_next(
        &mut requests,
        ActionOutcome::Born {
            child: sid(2),
            result: Some(OneShotResult {
                output: Some("x is 42".into()),
                structured: None,
                stop_reason: lineage_core::messages::StopReason::Completed,
                // Issue 39: the child changed 2 paths of the files it inherited.
                changes: Some(Box::new(lineage_core::workspace::WorkspaceChanges::new(
                    lineage_core::workspace::WorkspaceSnapshot::whole(
                        "c.base".into(),
                        "SHA-256=b".into(),
                    ),
                    lineage_core::workspace::WorkspaceSnapshot {
                        object: "c.tip-1".into(),
                        digest: "SHA-256=t".into(),
                        changed: Some(2),
                    },
                ))),
            }),
        },
    )
    .await;
    let TurnAction::Spawn(spec) = action else {
        panic!("{action:?}")
    };
    assert_eq!(spec.shape, SubagentShape::OneShot);
    assert_eq!(
        spec.agent,
        AgentSpec::Profile {
            profile: "researcher".into()
        }
    );
    assert_eq!(spec.prompt, "find x");
    assert_eq!(spec.label.as_deref(), Some("finder"));
    assert_eq!(spec.tool_filter, Some(vec!["read".to_owned()]));
    let result = call_task.await.unwrap().unwrap();
    assert_eq!(result.is_error, Some(false));
    let body: Value = serde_json::from_str(&text(&result)).unwrap();
    assert_eq!(
        body,
        json!({"child": sid(2), "output": "x is 42", "stop_reason": "completed",
               "changed_paths": 2,
               "changes": format!("Its files: 2 paths changed against the files it started from; apply_child_changes {{\"child\": \"{}\"}} applies them to yours.", sid(2))})
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn t3_m3_m4_report_followup_interrupt_list_and_wait_are_their_actions() {
    let (client, _slot, mut requests) = connect().await;
    let peer = client.peer().clone();
    let cases: Vec<(&str, Value, ActionOutcome)> = vec![
        (
            "report_to_parent",
            json!({"content": "halfway", "delivery": "wakeup"}),
            ActionOutcome::Done,
        ),
        (
            "send_to_child",
            json!({"child": sid(2).to_string(), "content": "more"}),
            ActionOutcome::Done,
        ),
        (
            "interrupt_child",
            json!({"child": sid(2).to_string()}),
            ActionOutcome::Done,
        ),
        ("list_children", json!({}), ActionOutcome::Children(vec![])),
        (
            "wait_for_children",
            json!({"mode": "any", "timeout_ms": 5000}),
            ActionOutcome::Arrived {
                messages: vec![TurnMessage::SubagentReport {
                    sender_session_id: sid(2),
                    content: "found".into(),
                }],
                complete: true,
            },
        ),
        (
            "apply_child_changes",
            json!({"child": sid(2).to_string()}),
            ActionOutcome::Applied {
                changed: vec![("a.txt".into(), "modified".into())],
                already: 1,
            },
        ),
    ];
    let mut bodies = Vec::new();
    let mut actions = Vec::new();
    for (name, args, outcome) in cases {
        let peer = peer.clone();
        let task = tokio::spawn(async move { peer.call_tool(call(name, args)).await });
        actions.push(answer_next(&mut requests, outcome).await);
        let result = task.await.unwrap().unwrap();
        assert_eq!(result.is_error, Some(false), "{name}: {}", text(&result));
        bodies.push(serde_json::from_str::<Value>(&text(&result)).unwrap());
    }
    assert!(matches!(
        &actions[0],
        TurnAction::Report { content, delivery: lineage_core::messages::Delivery::Wakeup } if content == "halfway"
    ));
    assert!(
        matches!(&actions[1], TurnAction::Followup { child, content } if *child == sid(2) && content == "more")
    );
    assert!(matches!(&actions[2], TurnAction::Interrupt { child } if *child == sid(2)));
    assert!(matches!(&actions[3], TurnAction::ListChildren));
    assert!(matches!(
        &actions[4],
        TurnAction::WaitChildren {
            children: None,
            mode: lineage_drivers::driver::WaitMode::Any,
            timeout_ms: 5000
        }
    ));
    assert_eq!(bodies[0], json!({"reported": true}));
    assert_eq!(bodies[3], json!({"children": []}));
    assert_eq!(
        bodies[4],
        json!({"complete": true, "messages": [{"kind": "report", "from": sid(2), "text": "found"}]})
    );
    assert!(matches!(&actions[5], TurnAction::ApplyChildChanges { child } if *child == sid(2)));
    assert_eq!(
        bodies[5],
        json!({"changed": [{"path": "a.txt", "change": "modified"}], "already": 1})
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn t5_d3_refusals_bad_arguments_and_no_turn_are_tool_errors_in_one_line() {
    let (client, slot, mut requests) = connect().await;
    let peer = client.peer().clone();
    // The host refuses: the refusal is the tool error, word for word.
    let task = tokio::spawn({
        let peer = peer.clone();
        async move {
            peer.call_tool(call(
                "spawn_subagent",
                json!({"profile": "p", "prompt": "x", "shape": "continuable"}),
            ))
            .await
        }
    });
    let refusal =
        "max depth 1 exceeded: attempted depth 2; do the work yourself instead of delegating";
    answer_next(&mut requests, ActionOutcome::Refused(refusal.into())).await;
    let result = task.await.unwrap().unwrap();
    assert_eq!(result.is_error, Some(true));
    assert_eq!(text(&result), refusal);
    // A child id that is not one: a tool error, and no action reaches the turn.
    let result = peer
        .call_tool(call(
            "send_to_child",
            json!({"child": "bob", "content": "hi"}),
        ))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(
        text(&result).starts_with("child \"bob\" is not a session id")
            && text(&result).ends_with("list_children shows your children's ids"),
        "{}",
        text(&result)
    );
    assert!(requests.try_recv().is_err(), "nothing reached the turn");
    // No turn runs: said so, in one line.
    slot.clear();
    let result = peer
        .call_tool(call("list_children", json!({})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        text(&result),
        format!(
            "session {} takes no turn now: lineage's tools work only while you answer a prompt",
            sid(1)
        )
    );
    // Unknown arguments are refused by the schema, not ignored.
    let refused = peer
        .call_tool(call("list_children", json!({"everything": true})))
        .await;
    match refused {
        Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
        Ok(result) => assert_eq!(result.is_error, Some(true), "{}", text(&result)),
    }
    client.cancel().await.unwrap();
}

/// C1, C4: a session with a tool filter is shown only the tools it allows, and a call to a
/// filtered tool is refused by the node (a one-line tool error; no action reaches the turn),
/// even when the agent calls it without having been shown it.
#[tokio::test]
async fn c4_a_tool_filter_narrows_the_list_and_the_node_refuses_a_filtered_call() {
    let (client, _slot, mut requests) =
        connect_filtered(Some(vec!["report_to_parent".into()])).await;
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(listed, ["report_to_parent"]);
    let refused = client
        .call_tool(call(
            "spawn_subagent",
            json!({"profile": "echo", "prompt": "x", "shape": "one-shot"}),
        ))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    let why = text(&refused);
    assert!(
        why.contains("spawn_subagent is not allowed") && why.contains("report_to_parent"),
        "{why}"
    );
    assert!(!why.contains('\n'), "{why}");
    assert!(
        requests.try_recv().is_err(),
        "a filtered call reached the turn"
    );
    // The allowed tool works.
    let reported =
        tokio::spawn(async move { answer_next(&mut requests, ActionOutcome::Done).await });
    let ok = client
        .call_tool(call("report_to_parent", json!({"content": "half way"})))
        .await
        .unwrap();
    assert_ne!(ok.is_error, Some(true), "{}", text(&ok));
    assert!(matches!(reported.await.unwrap(), TurnAction::Report { .. }));
    client.cancel().await.unwrap();
}
