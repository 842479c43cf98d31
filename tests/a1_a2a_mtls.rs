//! The A2A gateway over HTTPS with mutual TLS (issue 38, A1: "bearer token or mTLS as the
//! card declares"), driven by the official Python `a2a-sdk` (tests/a2a/client.py, httpx with a
//! client certificate) against real nodes and a real nats-server. Certificates are made by
//! `openssl` for the test (`lineage_testkit::tls`): a CA the gateway trusts, a client it
//! signed, and a stranger signed by another CA. The card declares the mtls scheme; a client with a signed certificate sends
//! and gets its task without a token; one without a certificate, or with the stranger's, is
//! refused in the handshake; bad TLS flags are one line and serve nothing.

use std::process::{Command, Stdio};

use lineage_testkit::binary::lineage_bin;
use lineage_testkit::free_port;
use lineage_testkit::prelude::Cluster;
use lineage_testkit::tls::make_ca;
use serde_json::Value;

mod a2a;
use a2a::{python_a2a_installed, replies, sent_task};

fn profiles() -> String {
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    format!(
        "[agents.helper]\ndriver = \"acp\"\ncommand = \"{agent}\"\na2a = true\ndescription = \"echoes what it is told\"\n",
        agent = agent.display()
    )
}

/// The client with `env` (A2A_CA, A2A_CERT, A2A_KEY); its exit code and JSON lines.
fn client(env: &[(&str, String)], args: &[&str]) -> (i32, Vec<Value>) {
    let out = a2a::client()
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run tests/a2a/client.py");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (out.status.code().unwrap_or(-1), lines)
}

#[test]
fn a1_mutual_tls_lets_a_signed_client_in_without_a_token_and_refuses_the_others() {
    python_a2a_installed();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_ca(d, "ca");
    make_ca(d, "other"); // its client is a stranger here
    let file = |n: &str| d.join(n).display().to_string();
    let c = Cluster::start_with_toml(1, &[], &profiles());
    let port = free_port().unwrap();
    let gateway = |extra: &[String]| {
        let mut cmd = Command::new(lineage_bin());
        cmd.args(["--nats", &c.nats.url(), "--cluster", &c.cluster])
            .args(["a2a", "--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env_remove("LINEAGE_A2A_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };

    // Bad flags: one line, exit 2, nothing served.
    for (extra, says) in [
        (vec!["--client-ca".to_owned(), file("ca.pem")], "--tls-cert"),
        (
            vec![
                "--tls-cert".into(),
                file("missing.pem"),
                "--tls-key".into(),
                file("ca-server-key.pem"),
                "--client-ca".into(),
                file("ca.pem"),
            ],
            "missing.pem",
        ),
        (
            vec![
                "--tls-cert".into(),
                file("ca-server.pem"),
                "--tls-key".into(),
                file("ca-client-key.pem"),
                "--client-ca".into(),
                file("ca.pem"),
            ],
            "do not go together",
        ),
    ] {
        let out = gateway(&extra).output().unwrap();
        assert!(out.stdout.is_empty(), "{extra:?}: served nothing");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
    }

    let mut child = gateway(&[
        "--tls-cert".into(),
        file("ca-server.pem"),
        "--tls-key".into(),
        file("ca-server-key.pem"),
        "--client-ca".into(),
        file("ca.pem"),
    ])
    .spawn()
    .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(first.contains("client certificate required"), "{first}");
    let url = format!("https://127.0.0.1:{port}/agents/helper");
    assert!(
        first.contains(&format!("https://127.0.0.1:{port}")),
        "{first}"
    );

    let trusted = vec![
        ("A2A_CA", file("ca.pem")),
        ("A2A_CERT", file("ca-client.pem")),
        ("A2A_KEY", file("ca-client-key.pem")),
    ];
    let (code, lines) = client(&trusted, &["send", &url, "-", "hello over mtls"]);
    assert_eq!(code, 0, "{lines:?}");
    let task = sent_task(lines.last().unwrap());
    assert!(
        replies(task).iter().any(|r| r.contains("hello over mtls")),
        "{lines:?}"
    );
    let card = Command::new("python3")
        .args([
            "-c",
            "import httpx,ssl,sys,json\nctx=ssl.create_default_context(cafile=sys.argv[2])\nctx.load_cert_chain(sys.argv[3],sys.argv[4])\nprint(json.dumps(httpx.get(sys.argv[1],verify=ctx).json()))",
            &format!("{url}/.well-known/agent-card.json"),
            &file("ca.pem"),
            &file("ca-client.pem"),
            &file("ca-client-key.pem"),
        ])
        .output()
        .unwrap();
    let card: Value = serde_json::from_slice(&card.stdout).unwrap_or(Value::Null);
    assert!(
        card["securitySchemes"]["mtls"]["mtlsSecurityScheme"].is_object(),
        "the card declares mtls: {card}"
    );
    assert!(card["securitySchemes"].get("bearer").is_none(), "{card}");

    // No certificate, or one another CA signed: refused in the handshake.
    for env in [
        vec![("A2A_CA", file("ca.pem"))],
        vec![
            ("A2A_CA", file("ca.pem")),
            ("A2A_CERT", file("other-client.pem")),
            ("A2A_KEY", file("other-client-key.pem")),
        ],
    ] {
        let (code, lines) = client(&env, &["send", &url, "-", "let me in"]);
        assert_eq!(code, 3, "{env:?}: {lines:?}");
    }
    let _ = child.kill();
    let _ = child.wait();
}
