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

#[path = "z2_permissions/connect.rs"]
mod connect;
#[path = "z2_permissions/nodes.rs"]
mod nodes;

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
