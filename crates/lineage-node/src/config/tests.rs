//! The configuration's load and validation (O1): every source, every bad key.

use std::path::Path;

use figment::providers::Env;

use super::*;

fn load_toml(text: &str) -> Result<LoadedConfig, NodeError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lineage.toml");
    std::fs::write(&path, text).unwrap();
    load_with_env(
        Some(&path),
        &FlagOverrides::default(),
        Env::prefixed("LINEAGE_TEST_NEVER_SET_").split("__"),
    )
}

#[test]
fn o1_defaults_are_valid() {
    let c = load_toml("").unwrap().config;
    assert_eq!(c, NodeConfig::default());
    assert_eq!(c.limits.max_depth.get(), 8);
}

#[test]
fn o1_file_overrides_defaults_and_flags_override_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.toml");
    std::fs::write(
        &path,
        "cluster = \"prod\"\nnats_url = \"nats://a:1\"\n[limits]\nmax_depth = 3\n",
    )
    .unwrap();
    let flags = FlagOverrides {
        nats_url: Some("nats://b:2".into()),
        cluster: None,
        nats: vec![],
        from_env: Default::default(),
    };
    let loaded = load_with_env(
        Some(&path),
        &flags,
        Env::prefixed("LINEAGE_TEST_NEVER_SET_"),
    )
    .unwrap();
    assert_eq!(loaded.config.cluster, "prod");
    assert_eq!(loaded.config.nats_url, "nats://b:2");
    assert_eq!(loaded.config.limits.max_depth.get(), 3);
    let sources = loaded.with_sources();
    let src = |k: &str| {
        sources
            .iter()
            .find(|(key, _, _)| key == k)
            .map(|(_, _, s)| s.clone())
            .unwrap()
    };
    assert!(src("cluster").contains("TOML"), "{}", src("cluster"));
    assert!(src("nats_url").contains("--nats"), "{}", src("nats_url"));
    assert!(
        src("lease.lease_ms").contains("default") || src("lease.lease_ms").contains("Serialized"),
        "{}",
        src("lease.lease_ms")
    );
}

#[test]
fn d4_o1_invalid_config_names_key_and_source() {
    let cases = [
        ("[limits]\nmax_depth = -1\n", "limits.max_depth"),
        ("[tools]\nhttp_addr = \"0.0.0.0:0\"\n", "tools.http_addr"),
        ("[limits]\nmax_children = -1\n", "limits.max_children"),
        (
            "[limits]\nmax_descendants = \"many\"\n",
            "limits.max_descendants",
        ),
        ("[tools]\nhttp_addr = \"localhost\"\n", "tools.http_addr"),
        ("[limits]\nmax_depth = 1.5\n", "limits.max_depth"),
        ("[limits]\nmax_depth = \"3\"\n", "limits.max_depth"),
        ("bogus = 1\n", "bogus"),
        ("[lease]\nlease_ms = \"soon\"\n", "lease.lease_ms"),
        (
            "[retention]\ndisposed_after_ms = -1\n",
            "retention.disposed_after_ms",
        ),
        ("[retention]\nkeep = 1\n", "retention.keep"),
        (
            "[retention]\nrequest_results_ms = 59999\n",
            "retention.request_results_ms",
        ),
        (
            "[retention]\nrequest_results_ms = 86400001\n",
            "retention.request_results_ms",
        ),
        ("[shutdown]\ngrace_ms = -5\n", "shutdown.grace_ms"),
        ("[shutdown]\ngrace_ms = \"30s\"\n", "shutdown.grace_ms"),
        ("[shutdown]\ngrace_ms = 3600001\n", "shutdown.grace_ms"),
        ("[shutdown]\ngrace = 1\n", "shutdown.grace"),
        (
            "[registry]\nvoters = { 1 = \"node-1\", 2 = \"node-2\" }\n",
            "registry.voters",
        ),
        (
            "[registry]\nsnapshot_after_commands = 0\n",
            "registry.snapshot_after_commands",
        ),
        (
            "[registry]\nlog_kept_behind_snapshot = -1\n",
            "registry.log_kept_behind_snapshot",
        ),
        ("cluster = \"a.b\"\n", "cluster"),
        ("[node]\nid = \"bad id\"\n", "node.id"),
    ];
    for (text, key) in cases {
        let err = match load_toml(text) {
            Ok(_) => panic!("accepted {text:?}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(key), "{text:?}: {err}");
        assert!(
            err.contains("TOML") || err.contains("lineage.toml"),
            "{text:?}: {err}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
    }
}

#[test]
fn o1_env_overrides_file_and_names_itself_in_errors() {
    std::env::set_var("LINEAGE_T1_LEASE__LEASE_MS", "9000");
    std::env::set_var("LINEAGE_T1_NODE__ID", "node-7");
    let loaded = load_with_env(
        None,
        &FlagOverrides::default(),
        Env::prefixed("LINEAGE_T1_").split("__"),
    )
    .unwrap();
    assert_eq!(loaded.config.lease.lease_ms, 9000);
    assert_eq!(loaded.config.node.id, "node-7");
    let sources = loaded.with_sources();
    let (_, _, src) = sources.iter().find(|(k, _, _)| k == "node.id").unwrap();
    assert!(src.contains("environment"), "{src}");

    std::env::set_var("LINEAGE_T2_LIMITS__MAX_DEPTH", "-1");
    let err = load_with_env(
        None,
        &FlagOverrides::default(),
        Env::prefixed("LINEAGE_T2_").split("__"),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("limits.max_depth") && err.contains("environment"),
        "{err}"
    );
}

#[test]
fn z1_secrets_are_redacted_and_half_configured_auth_is_refused() {
    let loaded = load_toml(
        "nats_url = \"nats://u:urlpass@h:4222\"\n[nats]\nuser = \"voter\"\npassword = \"hunter22\"\n",
    )
    .unwrap();
    let shown = format!("{:?} {:?}", loaded.with_sources(), loaded.config);
    assert!(
        !shown.contains("hunter22") && !shown.contains("urlpass"),
        "{shown}"
    );
    assert!(shown.contains("<redacted>"), "{shown}");
    let cases = [
        ("[nats]\nuser = \"voter\"\n", "nats.password"),
        ("[nats]\npassword = \"p\"\n", "nats.user"),
        ("[nats]\ntls_cert = \"/c.pem\"\n", "nats.tls_key"),
        ("[nats]\ntls_key = \"/k.pem\"\n", "nats.tls_cert"),
        (
            "[nats]\ncreds = \"/a.creds\"\ntoken = \"t\"\n",
            "nats.token",
        ),
        ("[nats]\nstream_replicas = 2\n", "nats.stream_replicas"),
        (
            "[agents.claude]\ndriver = \"acp\"\n",
            "agents.claude.command",
        ),
        ("[agents.x]\ndriver = \"ssh\"\n", "agents"),
    ];
    for (text, key) in cases {
        let err = match load_toml(text) {
            Ok(_) => panic!("accepted {text:?}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(key), "{text:?}: {err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
    // Files are read when the node connects: a missing one names its key.
    let loaded = load_toml("[nats]\nuser = \"u\"\npassword_file = \"/nonexistent/pw\"\n").unwrap();
    let err = loaded.config.nats_connect("t").unwrap_err().to_string();
    assert!(
        err.contains("nats.password_file") && err.contains("/nonexistent/pw"),
        "{err}"
    );
}

#[test]
fn k1_shutdown_grace_defaults_and_comes_from_the_environment() {
    assert_eq!(
        load_toml("").unwrap().config.shutdown.grace_ms,
        DEFAULT_GRACE_MS
    );
    std::env::set_var("LINEAGE_T2_SHUTDOWN__GRACE_MS", "4500");
    let loaded = load_with_env(
        None,
        &FlagOverrides::default(),
        Env::prefixed("LINEAGE_T2_").split("__"),
    )
    .unwrap();
    assert_eq!(loaded.config.shutdown.grace_ms, 4500);
    // The node's own filter lets `LINEAGE_SHUTDOWN__GRACE_MS` through.
    assert!(TOP_LEVEL_KEYS.contains(&"shutdown"));
    std::env::set_var("LINEAGE_T3_SHUTDOWN__GRACE_MS", "soon");
    let err = load_with_env(
        None,
        &FlagOverrides::default(),
        Env::prefixed("LINEAGE_T3_").split("__"),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("shutdown.grace_ms"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
}

#[test]
fn o1_foreign_lineage_env_vars_are_not_config() {
    std::env::set_var("LINEAGE_TEST_THREADS", "2");
    assert!(load(None, &FlagOverrides::default()).is_ok());
}

#[test]
fn o1_missing_config_file_is_a_clear_error() {
    let err = load(
        Some(Path::new("/nonexistent/lineage.toml")),
        &FlagOverrides::default(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("does not exist"), "{err}");
}
