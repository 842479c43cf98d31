//! Unit tests of agent profiles: admission, validation, isolation, request `cwd`.

use lineage_core::ids::SessionId;

use super::*;
use crate::driver::AgentSpec;

fn acp(command: &str) -> AgentProfile {
    AgentProfile {
        driver: ProfileDriver::Acp,
        command: command.into(),
        args: vec!["--stdio".into(), "two words".into()],
        env: BTreeMap::from([("MODE".into(), "test".into())]),
        pass_env: vec!["API_KEY".into()],
        ..AgentProfile::script("")
    }
}

fn profiles() -> AgentProfiles {
    let mut p = AgentProfiles::default();
    p.profiles.insert("agent".into(), acp("/usr/bin/agent"));
    p
}

fn env(name: &str) -> Option<String> {
    match name {
        "PATH" => Some("/usr/bin".into()),
        "API_KEY" => Some("k".into()),
        "SECRET_OF_THE_NODE" => Some("s".into()),
        _ => None,
    }
}

#[test]
fn t4_a_profile_runs_exactly_what_the_operator_wrote() {
    let session = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap();
    let spec = AgentSpec::Profile {
        profile: "agent".into(),
    };
    let Admitted::Acp(launch) = profiles()
        .admit(&spec, Some(&session), Path::new("/data"), &env)
        .unwrap()
    else {
        panic!("not acp")
    };
    assert_eq!(launch.command, ["/usr/bin/agent", "--stdio", "two words"]);
    assert_eq!(
        launch.workdir,
        Path::new("/data/work/01936c1e-7a3b-7cde-8f00-000000000001")
    );
    assert_eq!(launch.env.get("API_KEY").map(String::as_str), Some("k"));
    assert_eq!(launch.env.get("MODE").map(String::as_str), Some("test"));
    assert!(!launch.env.contains_key("SECRET_OF_THE_NODE"));
}

#[test]
fn t4_unknown_profiles_and_raw_commands_are_refused_with_the_known_names() {
    let p = profiles();
    let err = p
        .admit(
            &AgentSpec::Profile {
                profile: "nope".into(),
            },
            None,
            Path::new("/d"),
            &env,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"nope\"") && err.contains("agent, script"),
        "{err}"
    );
    let raw = AgentSpec::Acp {
        command: vec!["sh".into(), "-c".into(), "id > proof.txt".into()],
    };
    let err = p
        .admit(&raw, None, Path::new("/d"), &env)
        .unwrap_err()
        .to_string();
    assert!(err.contains("agents.allow_raw_commands"), "{err}");
    assert!(!err.contains('\n'));
    let mut dev = p.clone();
    dev.allow_raw_commands = true;
    assert!(matches!(
        dev.admit(&raw, None, Path::new("/d"), &env),
        Ok(Admitted::Acp(_))
    ));
}

#[test]
fn t4_invalid_profiles_are_refused_naming_the_key() {
    let cases: Vec<(AgentProfile, &str)> = vec![
        (acp(""), "agents.x.command"),
        (acp("my agent"), "agents.x.command"),
        (
            AgentProfile {
                workdir: "relative/dir".into(),
                ..acp("/bin/a")
            },
            "agents.x.workdir",
        ),
        (
            AgentProfile {
                prompt_timeout_ms: 0,
                ..acp("/bin/a")
            },
            "agents.x.prompt_timeout_ms",
        ),
        (
            AgentProfile {
                modes: BTreeMap::from([("sometimes".into(), "default".into())]),
                ..acp("/bin/a")
            },
            "agents.x.modes",
        ),
        (
            AgentProfile {
                modes: BTreeMap::from([("delegated".into(), " ".into())]),
                ..acp("/bin/a")
            },
            "agents.x.modes",
        ),
        (
            AgentProfile {
                command: "/bin/sh".into(),
                ..AgentProfile::script("")
            },
            "agents.x.command",
        ),
    ];
    for (profile, key) in cases {
        let mut p = AgentProfiles::default();
        p.profiles.insert("x".into(), profile);
        let (k, _) = p.validate().unwrap_err();
        assert_eq!(k, key);
    }
    let mut p = AgentProfiles::default();
    p.profiles.insert("bad name".into(), acp("/bin/a"));
    assert!(p.validate().is_err());
}

#[test]
fn v2_isolation_is_resolved_once_never_silently_downgraded() {
    let missing = Support::Missing("bubblewrap (bwrap) is not on the node's PATH".into());
    let available = Support::Available {
        bwrap: "/usr/bin/bwrap".into(),
        system: Vec::new(),
    };
    // sandbox on a node that cannot: the start is refused, naming the key and the reason.
    let mut p = profiles();
    p.profiles.get_mut("agent").unwrap().isolation = Isolation::Sandbox;
    let (key, why) = p.resolve_isolation(&missing, 1000).unwrap_err();
    assert_eq!(key, "agents.agent.isolation");
    assert!(why.contains("bubblewrap") && !why.contains('\n'), "{why}");
    // auto on a node that cannot: runs without, and says so.
    let mut p = profiles();
    let said = p.resolve_isolation(&missing, 1000).unwrap();
    assert!(
        said[0].contains("agents agent") && said[0].contains("without a sandbox"),
        "{said:?}"
    );
    let session = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap();
    let spec = AgentSpec::Profile {
        profile: "agent".into(),
    };
    let Ok(Admitted::Acp(launch)) = p.admit(&spec, Some(&session), Path::new("/d"), &env) else {
        panic!("not acp")
    };
    assert_eq!(launch.sandbox, None);
    // auto on a node that can: a sandbox, its tools over the bridge, HOME its workdir.
    let mut p = profiles();
    assert!(p.resolve_isolation(&available, 1000).unwrap().is_empty());
    let Ok(Admitted::Acp(launch)) = p.admit(&spec, Some(&session), Path::new("/d"), &env) else {
        panic!("not acp")
    };
    let plan = launch.sandbox.expect("sandboxed");
    assert_eq!(plan.workdir, launch.workdir);
    assert!(
        plan.read_only.contains(&PathBuf::from("/usr/bin")),
        "the command's directory"
    );
    assert!(launch.tools_stdio);
    assert_eq!(launch.env["HOME"], launch.workdir.display().to_string());
    // sandbox_uids: only on a node that may switch uids; a root node without is told.
    let mut p = profiles();
    p.sandbox_uids = Some(UidRange {
        first: 200000,
        last: 200009,
    });
    let (key, _) = p.resolve_isolation(&available, 1000).unwrap_err();
    assert_eq!(key, "agents.sandbox_uids");
    assert!(p.resolve_isolation(&available, 0).unwrap().is_empty());
    let said = profiles().resolve_isolation(&available, 0).unwrap();
    assert!(said[0].contains("agents.sandbox_uids"), "{said:?}");
}

#[test]
fn t4_a_request_cannot_pick_the_root_or_escape_the_workdir() {
    for bad in ["/", "/etc", "../x", "a/../../b", ""] {
        assert!(request_subdir(Some(bad)).is_err(), "{bad}");
    }
    assert_eq!(
        request_subdir(Some("repo/sub")).unwrap(),
        Some(PathBuf::from("repo/sub"))
    );
    assert_eq!(request_subdir(None).unwrap(), None);
}
