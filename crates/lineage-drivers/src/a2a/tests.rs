use super::*;
use a2a::{Artifact, TaskStatus};
use serde_json::json;

fn profile(url: Option<&str>) -> AgentProfile {
    AgentProfile {
        driver: crate::profiles::ProfileDriver::A2a,
        url: url.map(str::to_owned),
        ..AgentProfile::script("")
    }
}

#[test]
fn a2_an_a2a_profile_names_an_http_agent_and_nothing_to_run() {
    assert!(check_profile(&profile(Some("http://127.0.0.1:8484/agents/x"))).is_ok());
    assert_eq!(check_profile(&profile(None)).unwrap_err().0, "url");
    assert_eq!(
        check_profile(&profile(Some("https://x"))).unwrap_err().0,
        "url"
    );
    assert_eq!(
        check_profile(&profile(Some("http://"))).unwrap_err().0,
        "url"
    );
    let with_command = AgentProfile {
        command: "/bin/sh".into(),
        ..profile(Some("http://h/"))
    };
    assert_eq!(check_profile(&with_command).unwrap_err().0, "command");
    let with_tools = AgentProfile {
        tools: true,
        ..profile(Some("http://h/"))
    };
    assert_eq!(check_profile(&with_tools).unwrap_err().0, "tools");
    let bad_env = AgentProfile {
        bearer_env: Some("A=B".into()),
        ..profile(Some("http://h/"))
    };
    assert_eq!(check_profile(&bad_env).unwrap_err().0, "bearer_env");
}

fn task(state: TaskState, status: Option<&str>, artifact: Option<&str>) -> Task {
    Task {
        id: "t-1".into(),
        context_id: "c-1".into(),
        status: TaskStatus {
            state,
            message: status.map(|s| Message::new(Role::Agent, vec![Part::text(s)])),
            timestamp: None,
        },
        artifacts: artifact.map(|a| {
            vec![Artifact {
                artifact_id: "a".into(),
                name: None,
                description: None,
                parts: vec![Part::text(a)],
                metadata: None,
                extensions: None,
            }]
        }),
        history: None,
        metadata: None,
    }
}

#[test]
fn a2_a_remote_tasks_state_is_the_turns_outcome() {
    assert_eq!(
        verdict(&task(TaskState::Completed, None, Some("done"))),
        Verdict::Replied(Some("done".into()))
    );
    assert_eq!(
        verdict(&task(
            TaskState::InputRequired,
            Some("which file?"),
            Some("old")
        )),
        Verdict::Replied(Some("which file?".into())),
        "the status message first: the remote's question"
    );
    assert_eq!(
        verdict(&task(TaskState::Working, None, None)),
        Verdict::Working
    );
    assert_eq!(
        verdict(&task(TaskState::Submitted, None, None)),
        Verdict::Working
    );
    let Verdict::Failed(why) = verdict(&task(TaskState::Failed, Some("boom"), None)) else {
        panic!("a failed task fails the turn");
    };
    assert!(why.contains("t-1") && why.contains("boom"), "{why}");
    for state in [
        TaskState::Rejected,
        TaskState::Canceled,
        TaskState::AuthRequired,
    ] {
        assert!(
            matches!(
                verdict(&task(state.clone(), None, None)),
                Verdict::Failed(_)
            ),
            "{state:?}"
        );
    }
}

#[test]
fn a2_the_remote_task_survives_a_cold_resume_in_the_log() {
    let event = |seq, kind: &str, data| SessionEvent {
        seq,
        kind: kind.into(),
        data,
        at_ms: 1,
    };
    let log = vec![
        event(1, "turn/start", json!({"index": 0, "inputs": []})),
        event(
            2,
            "driver/state",
            json!({"a2a": {"task": "t-1", "context": "c-1"}}),
        ),
        event(
            3,
            "turn/end",
            json!({"index": 0, "stop_reason": "completed"}),
        ),
    ];
    assert_eq!(
        remote_task_in(&log),
        Some(RemoteTask {
            task: "t-1".into(),
            context: "c-1".into()
        })
    );
    let mut after_cancel = log.clone();
    after_cancel.push(event(4, "driver/state", json!({"a2a": null})));
    assert_eq!(
        remote_task_in(&after_cancel),
        None,
        "an interrupt let it go"
    );
    assert_eq!(remote_task_in(&[]), None);
}

#[test]
fn a2_a_nodes_missing_bearer_token_is_named_at_its_start() {
    let mut profiles = crate::profiles::AgentProfiles::default();
    profiles.profiles.insert(
        "remote".into(),
        AgentProfile {
            bearer_env: Some("REMOTE_TOKEN".into()),
            ..profile(Some("http://h/"))
        },
    );
    let (key, why) = profiles.check_secrets(&|_| None).unwrap_err();
    assert_eq!(key, "agents.remote.bearer_env");
    assert!(why.contains("REMOTE_TOKEN"), "{why}");
    assert!(profiles
        .check_secrets(&|n| (n == "REMOTE_TOKEN").then(|| "t".into()))
        .is_ok());
}
