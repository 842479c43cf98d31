//! Z1 under the shipped config: each password required (the run script refuses an empty or
//! malformed one), no credentials and wrong passwords refused, TLS with a test CA works and
//! plaintext is refused, a client that stops answering pings is dropped within seconds.

use super::*;

#[test]
pub(crate) fn z1_shipped_config_refuses_to_start_without_each_password() {
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
pub(crate) fn z1_run_script_refuses_empty_or_malformed_passwords_that_nats_server_would_accept() {
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
pub(crate) async fn z1_no_credentials_and_wrong_passwords_are_refused() {
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
pub(crate) async fn z1_tls_with_a_test_ca_works_and_plaintext_is_refused() {
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
pub(crate) fn z1_a_client_that_stops_answering_pings_is_dropped_within_seconds() {
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
