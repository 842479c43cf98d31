//! The shipped NATS permissions, `config/nats-server.conf`, against a real nats-server started
//! from that file (Z1, Z2): passwords come from the environment and are required; unknown or
//! wrong credentials are refused; a worker node cannot write the registry as a voter or as
//! another node, nor speak Raft; an observer can watch but not spawn; one cluster's users cannot
//! touch another cluster's subjects; TLS with a CA made here works and plaintext is refused; a
//! client that stops answering pings is dropped within seconds.
//!
//! The `authorization` block under test is always the shipped file's own text: only `listen`,
//! `server_name` and `store_dir` are templated (plus a `tls` block in the TLS test, and, in the
//! two-cluster test, the same users rewritten for clusters `a` and `b` next to the shipped ones).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lineage_testkit::shipped::{
    authorization_block, password_var_for_cluster, shipped_config, users_for_cluster, users_of,
    Passwords, ShippedNats, ShippedOptions, USERS,
};
use lineage_testkit::tls::make_ca;
use lineage_testkit::user_conn::UserConn;

/// The shipped server with fresh passwords.
fn shipped() -> ShippedNats {
    ShippedNats::start(Passwords::shipped(), ShippedOptions::default())
}

/// Connects as a shipped user with its password.
async fn as_user(server: &ShippedNats, user: &str) -> UserConn {
    UserConn::connect(&server.url(), user, Some(server.passwords.of(user)))
        .await
        .unwrap_or_else(|e| panic!("{user} with its password was refused: {e}"))
}

/// A request that must get no reply at all (the server dropped it): it times out, it is not
/// answered with "no responders".
async fn assert_no_reply(conn: &UserConn, subject: &str) {
    let reply = tokio::time::timeout(
        Duration::from_millis(1500),
        conn.client.request(subject.to_owned(), "{}".into()),
    )
    .await;
    match reply {
        Err(_) => {}
        Ok(Err(e)) if e.kind() == async_nats::client::RequestErrorKind::TimedOut => {}
        Ok(other) => panic!(
            "{}'s request on {subject} was answered: {other:?}",
            conn.user
        ),
    }
}

/// A voter connection answering every request on `subjects` with `{"ok":true}` and counting
/// what it received per subject.
struct Responder {
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Responder {
    async fn start(conn: &UserConn, subjects: &[&str]) -> Responder {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for subject in subjects {
            let mut sub = conn
                .client
                .subscribe((*subject).to_owned())
                .await
                .expect("responder subscribe");
            let client = conn.client.clone();
            let seen = seen.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(msg) = sub.next().await {
                    seen.lock().unwrap().push(msg.subject.to_string());
                    if let Some(reply) = msg.reply {
                        let _ = client.publish(reply, "{\"ok\":true}".into()).await;
                    }
                }
            }));
        }
        conn.sync().await;
        conn.assert_no_errors();
        Responder { seen, tasks }
    }

    fn received(&self, subject: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| *s == subject)
            .count()
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[test]
fn z1_shipped_config_refuses_to_start_without_each_password() {
    let passwords = Passwords::shipped();
    // The file names exactly the four shipped variables.
    let text = shipped_config();
    for (user, var) in USERS {
        assert!(
            text.contains(&format!("password: ${var}")),
            "{user}'s password must come from ${var}"
        );
    }
    // nats-server itself refuses to start when one is unset, naming it.
    for (_, var) in USERS {
        let options = ShippedOptions {
            unset: vec![var.to_owned()],
            ..Default::default()
        };
        match ShippedNats::try_start(&passwords, &options) {
            Ok(_) => panic!("nats-server started with {var} unset"),
            Err(e) => assert!(e.contains(var), "the refusal does not name {var}: {e}"),
        }
    }
    // With all four, the run script starts it.
    let ok = ShippedNats::start(
        passwords.clone(),
        ShippedOptions {
            via_run_script: true,
            ..Default::default()
        },
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        as_user(&ok, "voter").await;
    });
}

#[test]
fn z1_run_script_refuses_empty_or_malformed_passwords_that_nats_server_would_accept() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The hazard: nats-server alone starts with an empty variable and then lets anyone in as
    // that user with no password at all.
    let mut empty = Passwords::shipped();
    empty.vars[0].1 = String::new();
    let open = ShippedNats::start(empty.clone(), ShippedOptions::default());
    rt.block_on(async {
        let conn = UserConn::connect(&open.url(), "voter", Some(""))
            .await
            .expect(
                "nats-server does accept an empty password variable (the reason for the script)",
            );
        conn.client.flush().await.unwrap();
    });
    drop(open);
    // The run script refuses it, and a value nats-server would parse as a number, with one
    // line naming the variable; the server never starts.
    for value in ["", "12345678901234567890", "short1"] {
        let mut pw = Passwords::shipped();
        pw.vars[0].1 = value.to_owned();
        let options = ShippedOptions {
            via_run_script: true,
            ..Default::default()
        };
        match ShippedNats::try_start(&pw, &options) {
            Ok(_) => panic!("run-nats-server.sh started nats-server with voter password {value:?}"),
            Err(e) => {
                assert!(e.contains("exit status: 2"), "{e}");
                assert!(e.contains("LINEAGE_NATS_VOTER_PASSWORD"), "{e}");
                assert_eq!(e.matches("run-nats-server:").count(), 1, "{e}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z1_no_credentials_and_wrong_passwords_are_refused() {
    let server = shipped();
    let none = UserConn::connect(&server.url(), "anonymous", None).await;
    let err = none
        .err()
        .expect("a connection without credentials was accepted");
    assert!(
        err.to_string()
            .to_ascii_lowercase()
            .contains("authorization violation"),
        "{err}"
    );
    for (user, _) in USERS {
        let wrong = UserConn::connect(&server.url(), user, Some("pwrong0000000000000")).await;
        let err = wrong
            .err()
            .unwrap_or_else(|| panic!("{user} with a wrong password was accepted"));
        assert!(
            err.to_string()
                .to_ascii_lowercase()
                .contains("authorization violation"),
            "{err}"
        );
        // Another user's password is wrong too.
        let other = if user == "voter" { "observer" } else { "voter" };
        let crossed =
            UserConn::connect(&server.url(), user, Some(server.passwords.of(other))).await;
        assert!(crossed.is_err(), "{user} got in with {other}'s password");
        as_user(&server, user).await.assert_no_errors();
    }
    // An unknown user.
    let stranger =
        UserConn::connect(&server.url(), "node-9", Some(server.passwords.of("node-4"))).await;
    assert!(stranger.is_err(), "an unknown user got in");
    // No password ever reaches the server's log.
    let log = server.log();
    for (var, pw) in &server.passwords.vars {
        assert!(
            !log.contains(pw.as_str()),
            "{var}'s value is in the server log"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z2_worker_cannot_write_the_registry_as_a_voter_or_another_node_nor_speak_raft() {
    let server = shipped();
    let voter = as_user(&server, "voter").await;
    let worker = as_user(&server, "node-4").await;
    let forbidden = [
        "lineage.dev.registry.write",
        "lineage.dev.registry.1.write",
        "lineage.dev.registry.write.node-1",
        "lineage.dev.registry.1.write.node-1",
        // `registry.*.read` must not open a write "from a node named read".
        "lineage.dev.registry.write.read",
        "lineage.dev.raft.1.vote",
        "lineage.dev.raft.2.append",
        "lineage.dev.raft.3.snapshot",
        "lineage.dev.raft.1.vote-v2",
        "lineage.dev.raft.1.prevote-v2",
        "lineage.dev.raft.2.append-v2",
        "lineage.dev.raft.3.snapshot-v2",
        "lineage.dev.raft.3.transfer-v2",
    ];
    let allowed = [
        "lineage.dev.registry.write.node-4",
        "lineage.dev.registry.1.write.node-4",
        "lineage.dev.registry.read",
        "lineage.dev.registry.2.read",
    ];
    let mut all: Vec<&str> = forbidden.to_vec();
    all.extend_from_slice(&allowed);
    let responder = Responder::start(&voter, &all).await;

    for subject in forbidden {
        worker.assert_publish_refused(subject).await;
        assert_no_reply(&worker, subject).await;
        assert_eq!(
            responder.received(subject),
            0,
            "{subject} reached a voter from node-4"
        );
    }
    // What a worker must be able to do still works (and shows the responder would have seen
    // the forbidden ones).
    for subject in allowed {
        let reply = worker
            .client
            .request(subject.to_owned(), "{}".into())
            .await
            .unwrap_or_else(|e| panic!("node-4's request on {subject} failed: {e}"));
        assert_eq!(&reply.payload[..], b"{\"ok\":true}");
    }
    // A voter reaches every subject (the registry and Raft are its own).
    for subject in forbidden {
        voter
            .client
            .request(subject.to_owned(), "{}".into())
            .await
            .unwrap_or_else(|e| panic!("the voter's request on {subject} failed: {e}"));
    }
    voter.assert_no_errors();
    // A worker cannot take over voters' subscriptions (join the registry queue group, serve
    // Raft, or serve another node's control subjects).
    for subject in [
        "lineage.dev.registry.write",
        "lineage.dev.registry.>",
        "lineage.dev.raft.>",
        "lineage.dev.node.node-1.start",
        "lineage.dev.>",
        ">",
    ] {
        worker.assert_subscribe_refused(subject).await;
    }
    // Operators and observers do not write the registry or speak Raft either.
    for user in ["operator", "observer"] {
        let conn = as_user(&server, user).await;
        for subject in [
            "lineage.dev.registry.write",
            "lineage.dev.registry.1.write",
            "lineage.dev.registry.write.node-4",
            "lineage.dev.registry.write.read",
            "lineage.dev.raft.1.vote",
        ] {
            conn.assert_publish_refused(subject).await;
            assert_eq!(
                responder.received(subject),
                1,
                "{subject} reached a voter from {user}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z2_observer_subscribes_lifecycle_subjects_but_cannot_spawn() {
    let server = shipped();
    let voter = as_user(&server, "voter").await;
    let observer = as_user(&server, "observer").await;
    let operator = as_user(&server, "operator").await;
    let parent = "01936c1e-7a3b-7cde-8f00-000000000001";

    // Lifecycle events and inbox notices of one parent, as `nats sub` shows them.
    let mut sub = observer
        .client
        .subscribe("lineage.dev.parent.*.>")
        .await
        .unwrap();
    observer.sync().await;
    for kind in ["start", "end", "inbox"] {
        voter
            .client
            .publish(format!("lineage.dev.parent.{parent}.{kind}"), kind.into())
            .await
            .unwrap();
    }
    voter.client.flush().await.unwrap();
    for kind in ["start", "end", "inbox"] {
        let msg = tokio::time::timeout(Duration::from_secs(3), sub.next())
            .await
            .unwrap_or_else(|_| panic!("observer did not see {kind}"))
            .unwrap();
        assert_eq!(
            msg.subject.as_str(),
            format!("lineage.dev.parent.{parent}.{kind}")
        );
    }
    observer.assert_no_errors();

    // Spawning is refused: the control service never sees the request.
    let responder = Responder::start(&voter, &["lineage.dev.ctl.spawn"]).await;
    observer
        .assert_publish_refused("lineage.dev.ctl.spawn")
        .await;
    assert_no_reply(&observer, "lineage.dev.ctl.spawn").await;
    assert_eq!(responder.received("lineage.dev.ctl.spawn"), 0);
    // The operator's spawn gets through (the check above can fail).
    operator
        .client
        .request("lineage.dev.ctl.spawn", "{}".into())
        .await
        .expect("operator spawn request");
    assert_eq!(responder.received("lineage.dev.ctl.spawn"), 1);
    operator.assert_no_errors();

    // Nothing else that changes state: no other control op, no per-node op but status, no
    // inbox or log publish, no consumer (a consumer create can re-point an existing one).
    for subject in [
        "lineage.dev.ctl.drain",
        "lineage.dev.ctl.interrupt",
        "lineage.dev.ctl.followup",
        "lineage.dev.node.node-1.spawn",
        "lineage.dev.node.node-1.release",
        "lineage.dev.parent.x.inbox",
        "lineage.dev.session.x.events",
        "$JS.API.CONSUMER.CREATE.LINEAGE_DEV_INBOX.view.>",
        "$JS.API.CONSUMER.DELETE.LINEAGE_DEV_INBOX.inbox-x",
        "$JS.API.STREAM.UPDATE.LINEAGE_DEV_INBOX",
        "$JS.API.STREAM.PURGE.LINEAGE_DEV_INBOX",
        "$JS.ACK.LINEAGE_DEV_INBOX.inbox-x.1.1.1.1.0",
    ] {
        observer.assert_publish_refused(subject).await;
    }
    for subject in [
        "lineage.dev.ctl.*",
        "lineage.dev.registry.>",
        "lineage.dev.session.*.events",
    ] {
        observer.assert_subscribe_refused(subject).await;
    }
}

/// Clusters `a` and `b` next to the shipped `dev`, in one server: users rewritten from the
/// shipped entries by [`users_for_cluster`] (what the chart does for its cluster name).
fn three_clusters() -> ShippedNats {
    let text = shipped_config();
    let users = users_of(authorization_block(&text));
    let auth = format!(
        "authorization {{\n  users = [\n{users}\n{a}\n{b}\n  ]\n}}",
        a = users_for_cluster(users, "a"),
        b = users_for_cluster(users, "b"),
    );
    ShippedNats::start(
        Passwords::shipped().with_cluster("a").with_cluster("b"),
        ShippedOptions {
            authorization: Some(auth),
            ..Default::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z2_a_user_of_one_cluster_cannot_touch_another_clusters_subjects() {
    let server = three_clusters();
    let connect = |cluster: &str, user: &str| {
        let (name, var) = match cluster {
            "dev" => (
                user.to_owned(),
                USERS.iter().find(|(u, _)| *u == user).unwrap().1.to_owned(),
            ),
            c => (
                format!("{c}-{user}"),
                password_var_for_cluster(USERS.iter().find(|(u, _)| *u == user).unwrap().1, c),
            ),
        };
        let password = server.passwords.of_var(&var).to_owned();
        let url = server.url();
        async move {
            UserConn::connect(&url, &name, Some(&password))
                .await
                .unwrap_or_else(|e| panic!("{name} refused: {e}"))
        }
    };
    let foreign_publish = [
        "lineage.b.ctl.spawn",
        "lineage.b.ctl.status",
        "lineage.b.node.node-4.start",
        "lineage.b.node.node-1.status",
        "lineage.b.registry.read",
        "lineage.b.registry.1.read",
        "lineage.b.registry.write",
        "lineage.b.registry.write.node-4",
        "lineage.b.raft.1.vote",
        "lineage.b.parent.x.inbox",
        "lineage.b.session.x.events",
        "lineage.b.drain.x.progress",
        "$JS.API.STREAM.INFO.LINEAGE_B_INBOX",
        "$JS.API.STREAM.MSG.GET.LINEAGE_B_EVENTS",
        "$JS.API.DIRECT.GET.LINEAGE_B_EVENTS",
        "$JS.API.CONSUMER.CREATE.LINEAGE_B_INBOX.x.lineage.b.parent.x.inbox",
        "$JS.ACK.LINEAGE_B_INBOX.inbox-x.1.1.1.1.0",
    ];
    let foreign_subscribe = [
        "lineage.b.>",
        "lineage.b.parent.>",
        "lineage.b.ctl.*",
        "lineage.b.node.node-4.*",
        "lineage.b.registry.>",
        "lineage.b.drain.*.progress",
    ];
    for cluster in ["a", "dev"] {
        for (user, _) in USERS {
            let conn = connect(cluster, user).await;
            for subject in foreign_publish {
                conn.assert_publish_refused(subject).await;
            }
            for subject in foreign_subscribe {
                conn.assert_subscribe_refused(subject).await;
            }
        }
    }
    // Cluster b's own users do reach its subjects (the refusals above are about the cluster).
    let b_voter = connect("b", "voter").await;
    let b_operator = connect("b", "operator").await;
    let b_observer = connect("b", "observer").await;
    let _sub = b_observer
        .client
        .subscribe("lineage.b.parent.>")
        .await
        .unwrap();
    b_voter
        .client
        .publish("lineage.b.registry.write", "{}".into())
        .await
        .unwrap();
    b_operator
        .client
        .publish("lineage.b.ctl.spawn", "{}".into())
        .await
        .unwrap();
    for c in [&b_voter, &b_operator, &b_observer] {
        c.sync().await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for c in [&b_voter, &b_operator, &b_observer] {
        c.assert_no_errors();
    }
    // And a's users are confined the same way to a (not to b, not to dev).
    let a_worker = connect("a", "node-4").await;
    a_worker
        .client
        .publish("lineage.a.registry.write.node-4", "{}".into())
        .await
        .unwrap();
    a_worker.sync().await;
    a_worker.assert_no_errors();
    a_worker
        .assert_publish_refused("lineage.dev.registry.write.node-4")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z1_tls_with_a_test_ca_works_and_plaintext_is_refused() {
    let pki = tempfile::tempdir().unwrap();
    let dir = pki.path();
    make_ca(dir, "ca");
    make_ca(dir, "other"); // a CA the server does not trust
    let p = |f: &str| dir.join(f);
    // The shipped file's commented tls block, filled in (verify: client certificates required).
    let tls = format!(
        "\ntls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify: true\n  timeout: 2\n}}\n",
        p("ca-server.pem").display().to_string(),
        p("ca-server-key.pem").display().to_string(),
        p("ca.pem").display().to_string(),
    );
    assert!(
        shipped_config().contains("# tls {"),
        "config/nats-server.conf documents a tls block"
    );
    let server = ShippedNats::start(
        Passwords::shipped(),
        ShippedOptions {
            extra: tls,
            ..Default::default()
        },
    );
    let password = server.passwords.of("operator").to_owned();
    let url = format!("tls://127.0.0.1:{}", server.port());
    let tls_options = |ca: &str, client: Option<&str>| {
        let mut o = async_nats::ConnectOptions::new()
            .require_tls(true)
            .add_root_certificates(p(ca));
        if let Some(c) = client {
            o = o.add_client_certificate(
                p(&format!("{c}-client.pem")),
                p(&format!("{c}-client-key.pem")),
            );
        }
        o
    };

    // CA + client certificate + password: connected, and it carries traffic.
    let conn = UserConn::connect_with(
        &url,
        "operator",
        Some(&password),
        tls_options("ca.pem", Some("ca")),
    )
    .await
    .expect("TLS with the test CA and a client certificate");
    let mut sub = conn
        .client
        .subscribe("lineage.dev.parent.x.start")
        .await
        .unwrap();
    let voter = UserConn::connect_with(
        &url,
        "voter",
        Some(server.passwords.of("voter")),
        tls_options("ca.pem", Some("ca")),
    )
    .await
    .expect("voter over TLS");
    conn.sync().await;
    voter
        .client
        .publish("lineage.dev.parent.x.start", "hi".into())
        .await
        .unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(3), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&msg.payload[..], b"hi");
    conn.assert_no_errors();

    // Without a client certificate, with a server certificate from a CA we do not trust, or
    // with a client certificate from another CA: refused.
    for (what, options) in [
        ("no client certificate", tls_options("ca.pem", None)),
        ("untrusted server CA", tls_options("other.pem", Some("ca"))),
        (
            "client certificate of another CA",
            tls_options("ca.pem", Some("other")),
        ),
    ] {
        let r = UserConn::connect_with(&url, "operator", Some(&password), options).await;
        assert!(r.is_err(), "{what}: connected");
    }
    // A plain async-nats client (no CA given) does not get in either.
    let plain = UserConn::connect(&server.url(), "operator", Some(&password)).await;
    assert!(plain.is_err(), "a client without the CA connected");

    // Plaintext on the wire: the server says TLS is required and never answers the PING.
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut info = String::new();
    reader.read_line(&mut info).unwrap();
    assert!(info.contains("\"tls_required\":true"), "{info}");
    let connect = format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\"user\":\"operator\",\"pass\":\"{password}\"}}\r\nPING\r\n"
    );
    let _ = s.write_all(connect.as_bytes());
    let mut rest = String::new();
    let _ = reader.read_to_string(&mut rest);
    assert!(
        !rest.contains("PONG"),
        "a plaintext client was answered: {rest}"
    );
    assert!(
        !server.log().contains(&password),
        "a password reached the server log"
    );
}

#[test]
fn z1_a_client_that_stops_answering_pings_is_dropped_within_seconds() {
    let server = shipped();
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let connect = format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"user\":\"observer\",\"pass\":\"{}\"}}\r\nPING\r\n",
        server.passwords.of("observer")
    );
    s.write_all(connect.as_bytes()).unwrap();
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "PONG\r\n", "the observer could not connect");
    // From now on the client reads but never answers the server's PINGs (a hung process).
    let started = Instant::now();
    let mut pings = 0;
    let mut last = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {
                if line.starts_with("PING") {
                    pings += 1;
                }
                last = line.clone();
            }
            Err(e) => panic!("the connection was not closed within 20 s: {e}"),
        }
    }
    let took = started.elapsed();
    eprintln!("a hung client was dropped after {took:?} ({pings} unanswered pings)");
    assert!(
        last.contains("Stale Connection"),
        "closed without the stale-connection error: {last:?}"
    );
    assert!(pings >= 2, "closed after {pings} pings");
    assert!(
        took < Duration::from_secs(12),
        "a hung client was dropped only after {took:?}"
    );
}

/// A continuable child that reports once and settles. Its turn makes more events durable one
/// by one than [`lineage_core::log::COMPACT_MIN_MESSAGES`], so the turn's end compacts its log
/// and purges the messages before the compaction (issue 35) under the node's user.
fn reporting_child() -> serde_json::Value {
    let mut steps =
        vec![serde_json::json!({"do": "report", "content": "half way", "delivery": "quiet"})];
    for i in 0..lineage_core::log::COMPACT_MIN_MESSAGES {
        steps.push(serde_json::json!({"do": "reply", "text": format!("step {i}")}));
    }
    steps.push(serde_json::json!({"do": "reply", "text": "child done"}));
    serde_json::json!({"turns": [steps], "after": {"do": "echo"}})
}

/// Spawn, report, settle, followup (cold resume), drain across voters under the shipped
/// permissions: node-1..3 connect as `voter`, the CLI as `operator`; nothing is refused.
fn spawn_end_to_end(
    cluster: &lineage_testkit::prelude::Cluster,
    root_node: &str,
    child_nodes: &[&str],
) {
    use lineage_testkit::prelude::{accepted, spawn_step, Cluster};
    let steps: Vec<serde_json::Value> = child_nodes
        .iter()
        .map(|n| spawn_step("continuable", n, "work", reporting_child()))
        .collect();
    let root = cluster.spawn_root(
        root_node,
        &serde_json::json!({"turns": [steps], "after": {"do": "echo"}}),
    );
    let log = cluster.wait_log(
        &root,
        Duration::from_secs(30),
        "every child's report and settlement",
        |log| {
            accepted(log, "subagent-settled", None).len() == child_nodes.len()
                && accepted(log, "subagent-report", None).len() == child_nodes.len()
        },
    );
    assert_eq!(
        accepted(&log, "subagent-settled", None).len(),
        child_nodes.len()
    );
    let tree = cluster.tree(&root);
    let children = Cluster::children(&tree, &root);
    assert_eq!(children.len(), child_nodes.len(), "{tree:?}");
    for child in &children {
        cluster.wait_state(&root, child, "settled", Duration::from_secs(20));
    }
    // A followup cold-resumes a settled child (log read, placement claim, inbox publish).
    let (code, out, err) = cluster.cli(&["send", &children[0], "once more"]);
    assert_eq!(code, 0, "send: {err}{out}");
    cluster.wait_log(
        &root,
        Duration::from_secs(30),
        "the resumed child's notice",
        |log| accepted(log, "subagent-settled", None).len() > child_nodes.len(),
    );
    // Drain: admission closed, released and disposed across nodes, inbox consumers deleted.
    let (code, out, err) = cluster.cli(&["--json", "drain", &root]);
    assert_eq!(code, 0, "drain: {err}{out}");
    for row in cluster.tree(&root) {
        assert_eq!(row["state"], "disposed", "{row}");
    }
    // An observer reads (tree, status) but cannot spawn.
    let (code, _, err) = cluster.cli_as("observer", &["tree", &root]);
    assert_eq!(code, 0, "observer tree: {err}");
    let (code, _, err) = cluster.cli_as("observer", &["status"]);
    assert_eq!(code, 0, "observer status: {err}");
    let (code, out, err) = cluster.cli_as(
        "observer",
        &[
            "spawn",
            "--node",
            "node-1",
            "--prompt",
            "go",
            "--script",
            "{\"turns\":[]}",
        ],
    );
    assert_ne!(code, 0, "an observer spawned: {out}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    // Nothing but the observer's spawn was refused by the server.
    let violations: Vec<String> = cluster
        .permission_violations()
        .into_iter()
        .filter(|l| !(l.contains("user:observer") && l.contains("lineage.dev.ctl.spawn")))
        .collect();
    assert!(
        violations.is_empty(),
        "the shipped permissions refused what nodes or the CLI needed:\n{}",
        violations.join("\n")
    );
    assert!(
        cluster
            .permission_violations()
            .iter()
            .any(|l| l.contains("user:observer") && l.contains("lineage.dev.ctl.spawn")),
        "the observer's spawn was not refused by the server"
    );
}

#[test]
fn z2_voters_serve_a_spawn_end_to_end_under_the_shipped_permissions() {
    let cluster = lineage_testkit::prelude::Cluster::start_secured(3);
    spawn_end_to_end(&cluster, "node-1", &["node-2", "node-3"]);
}

/// A fresh request id.
fn request_id() -> lineage_core::ids::RequestId {
    lineage_core::ids::RequestId::parse(&uuid::Uuid::now_v7().to_string()).unwrap()
}

/// Milliseconds since the epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn z2_a_worker_node_hosts_as_node_4_and_cannot_act_as_another_node() {
    use lineage_core::ids::NodeId;
    use lineage_registry::{RegistryClient, RegistryError, RegistryRefusal};
    let mut cluster = lineage_testkit::prelude::Cluster::start_secured(3);
    cluster.add_worker("node-4");
    // The worker hosts a root and a child; another child is on a voter.
    spawn_end_to_end(&cluster, "node-4", &["node-1", "node-4"]);

    // The registry, through the worker's own NATS user: as itself it heartbeats; as node-1 it
    // is refused by the voters (sender_mismatch); the voters-only subjects are refused by NATS.
    let url = cluster.nats.url();
    let password = cluster.nats_password("node-4");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = UserConn::connect(&url, "node-4", Some(&password))
            .await
            .unwrap();
        let node4 = NodeId::parse("node-4").unwrap();
        let node1 = NodeId::parse("node-1").unwrap();
        let as_node4 = RegistryClient::new(conn.client.clone(), "dev").as_node(&node4);
        as_node4
            .heartbeat(request_id(), now_ms(), node4.clone(), 2_000, None)
            .await
            .expect("node-4 heartbeats as itself");
        match as_node4
            .heartbeat(request_id(), now_ms(), node1.clone(), 60_000, None)
            .await
        {
            Err(RegistryError::Refused(RegistryRefusal::SenderMismatch { sender, node })) => {
                assert_eq!((sender.as_str(), node.as_str()), ("node-4", "node-1"));
            }
            other => panic!("node-4 heartbeat as node-1: {other:?}"),
        }
        // The trusted subjects (bare `registry.write`): NATS drops them, the call times out.
        let bare =
            RegistryClient::new(conn.client.clone(), "dev").with_deadline(Duration::from_secs(3));
        let refused = bare
            .heartbeat(request_id(), now_ms(), node1.clone(), 60_000, None)
            .await;
        assert!(
            refused.is_err(),
            "node-4 wrote on the voters' subject: {refused:?}"
        );
        assert!(
            conn.violation("lineage.dev.registry.write", "publish")
                .await
                .is_some(),
            "{:?}",
            conn.errors()
        );
    });
    let worker_violations: Vec<String> = cluster
        .permission_violations()
        .into_iter()
        .filter(|l| l.contains("user:node-4") && !l.contains("z2-test-node-4"))
        .collect();
    assert!(
        worker_violations.is_empty(),
        "the worker node was refused what it needs:\n{}",
        worker_violations.join("\n")
    );
}

#[test]
/// Failed before 77c7e90: the voters served the redirected message as a trusted write.
fn z2_a_worker_cannot_inject_registry_writes_through_a_jetstream_push_consumer() {
    let mut cluster = lineage_testkit::prelude::Cluster::start_secured(3);
    cluster.add_worker("node-4");
    let url = cluster.nats.url();
    let password = cluster.nats_password("node-4");
    let fake = "01936c1e-7a3b-7cde-8f00-0000000000f1";
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = UserConn::connect(&url, "node-4", Some(&password)).await.unwrap();
        // Everything here is within node-4's permissions: consumers on the inbox stream
        // filtered on one (fake) parent's inbox, and a publish to that inbox. The consumers
        // deliver to the voters' subjects: the queue group `registry` on the bare write
        // subject, and each member's direct write subject (a plain subscription).
        let filter = format!("lineage.dev.parent.{fake}.inbox");
        for (name, deliver, group) in [
            ("forge-q", "lineage.dev.registry.write", Some("registry")),
            ("forge-1", "lineage.dev.registry.1.write", None),
            ("forge-2", "lineage.dev.registry.2.write", None),
            ("forge-3", "lineage.dev.registry.3.write", None),
        ] {
            let create = format!("$JS.API.CONSUMER.CREATE.LINEAGE_DEV_INBOX.{name}.{filter}");
            let mut config = serde_json::json!({"name": name, "filter_subject": filter,
                "deliver_subject": deliver, "ack_policy": "none", "deliver_policy": "all"});
            if let Some(g) = group {
                config["deliver_group"] = g.into();
            }
            let body = serde_json::json!({"stream_name": "LINEAGE_DEV_INBOX", "config": config});
            let reply = conn
                .client
                .request(create, body.to_string().into())
                .await
                .expect("consumer create");
            let text = String::from_utf8_lossy(&reply.payload).to_string();
            eprintln!("consumer {name} -> {deliver}: {}", &text[..text.len().min(160)]);
        }
        let forged = serde_json::json!({"cmd": "heartbeat", "request_id": uuid::Uuid::now_v7().to_string(),
            "at_ms": now_ms(), "node": "node-9", "lease_ms": 600_000});
        let js = async_nats::jetstream::new(conn.client.clone());
        js.publish(filter.clone(), forged.to_string().into())
            .await
            .expect("publish")
            .await
            .expect("stored in the inbox stream");
    });
    std::thread::sleep(Duration::from_secs(2));
    let status = cluster.cli_json(&["status"]);
    let nodes: Vec<String> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap_or("?").to_owned())
        .collect();
    assert!(
        !nodes.iter().any(|n| n == "node-9"),
        "a forged heartbeat for node-9 reached the registry through a push consumer: {nodes:?}"
    );
}

/// Turn output (F1): a hosting node (voter or worker) publishes it, the operator's and the
/// observer's clients (`lineage acp`, `nats sub`) watch every session's, and neither may
/// publish it (no client can put words in a session's mouth).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z2_f1_nodes_publish_turn_output_and_clients_only_watch_it() {
    let server = shipped();
    let voter = as_user(&server, "voter").await;
    let operator = as_user(&server, "operator").await;
    let observer = as_user(&server, "observer").await;
    let session = "01936c1e-7a3b-7cde-8f00-000000000001";
    let subject = format!("lineage.dev.session.{session}.output");
    let mut watches = Vec::new();
    for user in [&operator, &observer] {
        watches.push(
            user.client
                .subscribe("lineage.dev.session.*.output")
                .await
                .unwrap(),
        );
        user.sync().await;
    }
    voter
        .client
        .publish(subject.clone(), "chunk".into())
        .await
        .unwrap();
    voter.client.flush().await.unwrap();
    for watch in &mut watches {
        let msg = tokio::time::timeout(Duration::from_secs(3), watch.next())
            .await
            .expect("the watcher sees the node's output")
            .unwrap();
        assert_eq!(msg.subject.as_str(), subject);
    }
    voter.assert_no_errors();
    operator.assert_no_errors();
    observer.assert_no_errors();
    operator.assert_publish_refused(&subject).await;
    observer.assert_publish_refused(&subject).await;
}
