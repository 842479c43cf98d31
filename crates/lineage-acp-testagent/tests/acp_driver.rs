//! The `acp` driver (H1, M4, K1) against the `lineage-acp-testagent` binary.
//!
//! The suite lives beside the agent so that cargo builds the binary before the tests run
//! (`CARGO_BIN_EXE_lineage-acp-testagent`, same profile and target dir) instead of a nested
//! `cargo build` inside the first test that needs it (which rebuilt shared dependencies with
//! another feature set and held two tests for minutes in a cold CI run); set
//! `LINEAGE_ACP_TESTAGENT_BIN` to use a prebuilt one instead.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lineage_core::ids::SessionId;
use lineage_core::log::SessionEvent;
use lineage_drivers::acp::{AcpCanceller, AcpDriver, PermissionPolicy, ACP_SESSION_EVENT};
use lineage_drivers::driver::{AgentDriver, DriverAction, DriverStart, TurnInput, TurnMessage};
use serde_json::json;

/// The test agent's executable: cargo builds it (this package's binary) before these tests
/// run; `LINEAGE_ACP_TESTAGENT_BIN` picks another one.
fn agent_bin() -> PathBuf {
    std::env::var_os("LINEAGE_ACP_TESTAGENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lineage-acp-testagent")))
}

/// A per-test directory: the agent's cwd and its session store.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn command(&self, extra: &[&str]) -> Vec<String> {
        let mut command = vec![
            agent_bin().display().to_string(),
            "--dir".to_string(),
            self.dir.path().join("store").display().to_string(),
        ];
        command.extend(extra.iter().map(|s| s.to_string()));
        command
    }

    fn driver(&self, extra: &[&str]) -> AcpDriver {
        AcpDriver::new(self.command(extra), self.dir.path().to_path_buf())
            .with_init_timeout(Duration::from_secs(20))
            .with_prompt_timeout(Duration::from_secs(20))
    }
}

fn session() -> SessionId {
    SessionId::parse("01890a5d-ac96-774b-bcce-b302099a8057").expect("valid session id")
}

fn fresh() -> DriverStart {
    DriverStart {
        session: session(),
        log: Vec::new(),
        resumed: false,
        composition: Default::default(),
    }
}

fn user(turn_index: u64, text: &str) -> TurnInput {
    TurnInput {
        turn_index,
        messages: vec![TurnMessage::User {
            content: text.to_string(),
        }],
    }
}

fn event(seq: u64, kind: &str, data: serde_json::Value) -> SessionEvent {
    SessionEvent {
        seq,
        kind: kind.to_string(),
        data,
        at_ms: seq,
    }
}

fn reply(actions: Vec<DriverAction>) -> String {
    match actions.as_slice() {
        [DriverAction::Reply(text)] => text.clone(),
        other => panic!("expected one reply, got {other:?}"),
    }
}

#[test]
fn the_driver_is_send_and_object_safe() {
    fn send<T: Send + 'static>() {}
    send::<AcpDriver>();
    send::<AcpCanceller>();
    let boxed: Box<dyn AgentDriver> = Box::new(AcpDriver::new(vec!["x".into()], "/".into()));
    assert!(boxed.start_record().is_none());
}

#[tokio::test]
async fn prompt_returns_the_streamed_echo() {
    let fx = Fixture::new();
    let mut driver = fx.driver(&[]);
    driver.start(fresh()).await.expect("start");
    let record = driver.start_record().expect("a session record after start");
    assert_eq!(record.0, ACP_SESSION_EVENT);
    assert_eq!(
        record.1["acp_session_id"].as_str(),
        driver.acp_session_id().as_deref()
    );

    // The agent streams "echo: ", the text and " [turn N]" as three chunks.
    let first = driver.turn(user(0, "hello")).await.expect("turn");
    assert_eq!(reply(first), "echo: hello [turn 1]");
    let second = driver
        .turn(TurnInput {
            turn_index: 1,
            messages: vec![
                TurnMessage::User {
                    content: "a".into(),
                },
                TurnMessage::User {
                    content: "b".into(),
                },
            ],
        })
        .await
        .expect("turn");
    assert_eq!(reply(second), "echo: a\nb [turn 2]");
    driver.shutdown().await;
}

#[tokio::test]
async fn canceller_interrupts_a_slow_prompt_promptly() {
    let fx = Fixture::new();
    let mut driver = fx.driver(&[]);
    driver.start(fresh()).await.expect("start");
    let canceller = driver.canceller().expect("canceller after start");

    let began = Instant::now();
    let (actions, cancelled) = tokio::join!(driver.turn(user(0, "slow work")), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        canceller.cancel()
    });
    cancelled.expect("session/cancel sent");
    let actions = actions.expect("the cancelled turn still ends");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "cancel took {:?}",
        began.elapsed()
    );
    match actions.as_slice() {
        [DriverAction::Fail(reason)] => assert!(reason.contains("cancelled"), "{reason}"),
        other => panic!("expected a cancelled outcome, got {other:?}"),
    }

    // The session goes on; the cancelled prompt left no turn in the agent's history.
    let next = driver.turn(user(1, "again")).await.expect("turn");
    assert_eq!(reply(next), "echo: again [turn 1]");
    driver.shutdown().await;
}

#[tokio::test]
async fn dropped_turn_then_cancel_recovers_the_session() {
    let fx = Fixture::new();
    let mut driver = fx.driver(&[]);
    driver.start(fresh()).await.expect("start");

    // The host interrupts by dropping the turn future (M4), then calls cancel.
    let dropped =
        tokio::time::timeout(Duration::from_millis(300), driver.turn(user(0, "slow"))).await;
    assert!(dropped.is_err(), "the slow turn should still be running");
    let began = Instant::now();
    driver.cancel().await;
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "cancel took {:?}",
        began.elapsed()
    );

    // Nothing of the cancelled prompt ("stopping") leaks into the next reply.
    let next = driver.turn(user(1, "after")).await.expect("turn");
    assert_eq!(reply(next), "echo: after [turn 1]");
    driver.shutdown().await;
}

#[tokio::test]
async fn cold_resume_loads_the_session_in_a_new_process() {
    let fx = Fixture::new();
    let mut first = fx.driver(&[]);
    first.start(fresh()).await.expect("start");
    let answer = reply(first.turn(user(0, "first")).await.expect("turn"));
    assert_eq!(answer, "echo: first [turn 1]");
    let (kind, data) = first.start_record().expect("session record");
    let acp_id = first.acp_session_id();
    first.shutdown().await;

    let log = vec![
        event(1, "turn/user", json!({"text": "first"})),
        event(2, &kind, data),
        event(3, "turn/assistant", json!({"text": answer})),
    ];
    let mut second = fx.driver(&[]);
    second
        .start(DriverStart {
            session: session(),
            log,
            resumed: true,
            composition: Default::default(),
        })
        .await
        .expect("resume");
    assert!(second.session_loaded(), "the agent advertised loadSession");
    assert_eq!(second.acp_session_id(), acp_id);
    // The agent counts the loaded turn; the replayed history is not part of the reply.
    let next = reply(second.turn(user(1, "second")).await.expect("turn"));
    assert_eq!(next, "echo: second [turn 2]");
    second.shutdown().await;
}

#[tokio::test]
async fn cold_resume_without_load_replays_the_log() {
    let fx = Fixture::new();
    let log = vec![
        event(1, "turn/user", json!({"text": "first"})),
        event(2, "turn/assistant", json!({"text": "echo: first [turn 1]"})),
    ];
    let mut driver = fx.driver(&["--no-load"]);
    driver
        .start(DriverStart {
            session: session(),
            log,
            resumed: true,
            composition: Default::default(),
        })
        .await
        .expect("resume");
    assert!(!driver.session_loaded());
    let text = reply(driver.turn(user(1, "second")).await.expect("turn"));
    assert!(text.starts_with("echo: "), "{text}");
    assert!(
        text.contains("User: first\nAssistant: echo: first [turn 1]"),
        "{text}"
    );
    assert!(text.ends_with("second [turn 1]"), "{text}");
    // Only the first prompt carries the replay.
    let later = reply(driver.turn(user(2, "third")).await.expect("turn"));
    assert_eq!(later, "echo: third [turn 2]");
    driver.shutdown().await;
}

#[tokio::test]
async fn cold_resume_falls_back_to_replay_when_the_agent_lost_the_session() {
    let fx = Fixture::new();
    let log = vec![
        event(1, "turn/user", json!({"text": "first"})),
        event(2, ACP_SESSION_EVENT, json!({"acp_session_id": "gone"})),
        event(3, "turn/assistant", json!({"text": "echo: first [turn 1]"})),
    ];
    let mut driver = fx.driver(&[]);
    driver
        .start(DriverStart {
            session: session(),
            log,
            resumed: true,
            composition: Default::default(),
        })
        .await
        .expect("resume");
    assert!(!driver.session_loaded());
    assert_ne!(driver.acp_session_id().as_deref(), Some("gone"));
    let text = reply(driver.turn(user(1, "second")).await.expect("turn"));
    assert!(text.contains("User: first"), "{text}");
    assert!(text.ends_with("second [turn 1]"), "{text}");
    driver.shutdown().await;
}

#[tokio::test]
async fn c4_permission_requests_follow_the_policy() {
    let fx = Fixture::new();
    // lineage's rule (the default): nothing but lineage's own tools, and a driver without
    // tools has none, so a request is rejected (the model hears "refused"), never cancelled.
    let mut rule = fx.driver(&[]);
    rule.start(fresh()).await.expect("start");
    let text = reply(rule.turn(user(0, "ask first")).await.expect("turn"));
    assert_eq!(
        text,
        "echo: ask first [turn 1] [permission: selected reject]"
    );
    let text = reply(
        rule.turn(user(1, "ask tool:report_to_parent"))
            .await
            .expect("turn"),
    );
    assert_eq!(
        text,
        "echo: ask tool:report_to_parent [turn 2] [permission: selected reject]"
    );
    rule.shutdown().await;

    let mut deny = fx
        .driver(&[])
        .with_permission_policy(PermissionPolicy::Deny);
    deny.start(fresh()).await.expect("start");
    let text = reply(deny.turn(user(0, "ask first")).await.expect("turn"));
    assert_eq!(text, "echo: ask first [turn 1] [permission: cancelled]");
    deny.shutdown().await;

    let mut allow = fx
        .driver(&[])
        .with_permission_policy(PermissionPolicy::AllowOnce);
    allow.start(fresh()).await.expect("start");
    let text = reply(allow.turn(user(0, "ask first")).await.expect("turn"));
    assert_eq!(
        text,
        "echo: ask first [turn 1] [permission: selected allow]"
    );
    allow.shutdown().await;
}

/// C4: a session's own tools are allowed, a filtered one and anything else are rejected.
#[tokio::test]
async fn c4_lineage_tools_are_allowed_within_the_filter_and_nothing_else() {
    let fx = Fixture::new();
    let slot = lineage_drivers::tools::TurnSlot::default();
    slot.set_tool_filter(Some(vec!["report_to_parent".into()]));
    let mut driver = fx
        .driver(&[])
        .with_permission_policy(PermissionPolicy::Lineage {
            tools: Some(slot),
            approver: None,
        });
    driver.start(fresh()).await.expect("start");
    for (turn, tool, answer) in [
        (0, "report_to_parent", "selected allow"),
        (1, "spawn_subagent", "selected reject"),
        (2, "Bash", "selected reject"),
    ] {
        let prompt = format!("ask tool:{tool}");
        let text = reply(driver.turn(user(turn, &prompt)).await.expect("turn"));
        assert_eq!(
            text,
            format!("echo: {prompt} [turn {}] [permission: {answer}]", turn + 1)
        );
    }
    driver.shutdown().await;
}

#[tokio::test]
async fn refusal_becomes_a_failed_turn() {
    let fx = Fixture::new();
    let mut driver = fx.driver(&[]);
    driver.start(fresh()).await.expect("start");
    let actions = driver.turn(user(0, "please refuse")).await.expect("turn");
    match actions.as_slice() {
        [DriverAction::Fail(reason)] => assert!(reason.contains("refused"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    driver.shutdown().await;
}

#[tokio::test]
async fn prompt_deadline_gives_a_one_line_error() {
    let fx = Fixture::new();
    let mut driver = fx
        .driver(&[])
        .with_prompt_timeout(Duration::from_millis(300));
    driver.start(fresh()).await.expect("start");
    let err = driver
        .turn(user(0, "slow"))
        .await
        .expect_err("the deadline passes");
    let message = err.to_string();
    assert!(message.contains("within 300 ms"), "{message}");
    assert!(!message.contains('\n'), "{message}");
    driver.shutdown().await;
}

#[tokio::test]
async fn missing_agent_command_gives_a_clear_one_line_error() {
    let fx = Fixture::new();
    let mut driver = AcpDriver::new(
        vec!["/nonexistent/lineage-no-such-agent".into(), "--x".into()],
        fx.dir.path().to_path_buf(),
    );
    let err = driver.start(fresh()).await.expect_err("no such program");
    let message = err.to_string();
    assert!(message.contains("lineage-no-such-agent"), "{message}");
    assert!(message.contains("cannot start it"), "{message}");
    assert!(message.contains("check the agent command"), "{message}");
    assert!(!message.contains('\n'), "{message}");

    let mut empty = AcpDriver::new(Vec::new(), fx.dir.path().to_path_buf());
    let err = empty.start(fresh()).await.expect_err("empty command");
    assert!(err.to_string().contains("command is empty"), "{err}");
}

#[tokio::test]
async fn agent_that_exits_reports_its_status_and_stderr() {
    let fx = Fixture::new();
    let mut driver = AcpDriver::new(
        vec!["sh".into(), "-c".into(), "echo boom >&2; exit 3".into()],
        fx.dir.path().to_path_buf(),
    )
    .with_init_timeout(Duration::from_secs(10));
    let err = driver.start(fresh()).await.expect_err("the agent exits");
    let message = err.to_string();
    assert!(message.contains("initialize failed"), "{message}");
    assert!(message.contains("exit status: 3"), "{message}");
    assert!(message.contains("boom"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

#[tokio::test]
async fn silent_agent_hits_the_initialize_deadline() {
    let fx = Fixture::new();
    let mut driver = AcpDriver::new(
        vec!["sleep".into(), "30".into()],
        fx.dir.path().to_path_buf(),
    )
    .with_init_timeout(Duration::from_millis(500));
    let began = Instant::now();
    let err = driver.start(fresh()).await.expect_err("no answer");
    assert!(began.elapsed() < Duration::from_secs(5));
    let message = err.to_string();
    assert!(
        message.contains("did not answer initialize within 500 ms"),
        "{message}"
    );
}
