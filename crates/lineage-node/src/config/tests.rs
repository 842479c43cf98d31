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

/// Three voters, this one raft id 1, with `[registry.direct]` lines appended.
fn three_voters_direct(direct: &str) -> String {
    format!(
        "[registry]\nraft_id = 1\nvoters = {{ 1 = \"node-1\", 2 = \"node-2\", 3 = \"node-3\" }}\n[registry.direct]\n{direct}"
    )
}

#[test]
fn g1_z1_direct_raft_links_are_checked_and_their_token_never_shown() {
    let peers = "peers = { 2 = \"node-2.raft:7101\", 3 = \"10.0.0.3:7101\" }\n";
    let good = three_voters_direct(&format!(
        "listen = \"0.0.0.0:7101\"\n{peers}token = \"a-direct-raft-token-of-some-length\"\n"
    ));
    let loaded = load_toml(&good).unwrap();
    let shown = format!("{:?} {:?}", loaded.with_sources(), loaded.config);
    assert!(!shown.contains("a-direct-raft-token"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    let links = loaded
        .config
        .registry
        .direct
        .as_ref()
        .unwrap()
        .links()
        .unwrap();
    assert_eq!(links.listen.port(), 7101);
    assert_eq!(
        links.peers.get(&2).map(String::as_str),
        Some("node-2.raft:7101")
    );
    assert!(!format!("{links:?}").contains("a-direct-raft-token"));

    let cases = [
        (format!("listen = \"0.0.0.0:7101\"\n{peers}"), "registry.direct.token_file", "shared token"),
        (
            format!("listen = \"0.0.0.0:7101\"\n{peers}token = \"short\"\n"),
            "registry.direct.token",
            "fewer than 16",
        ),
        (
            format!("listen = \"0.0.0.0:7101\"\n{peers}token = \"a-direct-raft-token-of-some-length\"\ntoken_file = \"/t\"\n"),
            "registry.direct.token_file",
            "give one",
        ),
        (
            format!("listen = \"somewhere\"\n{peers}token_file = \"/t\"\n"),
            "registry.direct.listen",
            "not an address",
        ),
        (
            "listen = \"0.0.0.0:7101\"\npeers = { 2 = \"node-2.raft:7101\" }\ntoken_file = \"/t\"\n".into(),
            "registry.direct.peers",
            "voter 3 has no address",
        ),
        (
            "listen = \"0.0.0.0:7101\"\npeers = { 2 = \"a:1\", 3 = \"b:1\", 4 = \"c:1\" }\ntoken_file = \"/t\"\n".into(),
            "registry.direct.peers",
            "not in registry.voters",
        ),
        (
            "listen = \"0.0.0.0:7101\"\npeers = { 2 = \"node-2\", 3 = \"b:1\" }\ntoken_file = \"/t\"\n".into(),
            "registry.direct.peers",
            "not host:port",
        ),
    ];
    for (direct, key, says) in cases {
        let text = three_voters_direct(&direct);
        let err = match load_toml(&text) {
            Ok(_) => panic!("accepted {text:?}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(key) && err.contains(says), "{text:?}: {err}");
        assert!(!err.contains('\n') && !err.contains("some-length"), "{err}");
    }
    // Fail closed: a client has no Raft links; a node on TLS keeps Raft under TLS.
    let client = good.replace("raft_id = 1\n", "raft_id = 1\nrole = \"client\"\n");
    let err = load_toml(&client).err().unwrap().to_string();
    assert!(err.contains("for voters"), "{err}");
    let tls = format!("[nats]\ntls_required = true\n{good}");
    let err = load_toml(&tls).err().unwrap().to_string();
    assert!(err.contains("would not be encrypted"), "{err}");
    // With mutual TLS on the links it loads; a half-set one names the missing key.
    let with_tls =
        format!("{tls}tls_ca = \"/ca.pem\"\ntls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n");
    assert!(load_toml(&with_tls).is_ok());
    let half = format!("{good}tls_ca = \"/ca.pem\"\ntls_key = \"/k.pem\"\n");
    let err = load_toml(&half).err().unwrap().to_string();
    assert!(err.contains("registry.direct.tls_cert is not set"), "{err}");
    let tls_url = format!("nats_url = \"tls://nats.example:4222\"\n{good}");
    let err = load_toml(&tls_url).err().unwrap().to_string();
    assert!(err.contains("would not be encrypted"), "{err}");
    // The token file is read at start; a missing one names its key, a short one is refused.
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "tiny\n").unwrap();
    for (file, says) in [
        ("/nonexistent/raft-token".to_owned(), "cannot read"),
        (short.display().to_string(), "fewer than 16"),
    ] {
        let text = three_voters_direct(&format!(
            "listen = \"0.0.0.0:7101\"\n{peers}token_file = \"{file}\"\n"
        ));
        let err = load_toml(&text)
            .unwrap()
            .config
            .registry
            .direct
            .unwrap()
            .links()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("registry.direct.token_file") && err.contains(says),
            "{err}"
        );
        assert!(!err.contains("tiny"), "{err}");
    }
}
