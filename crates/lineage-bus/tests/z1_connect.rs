//! Z1: connecting to a nats-server that requires authorization: the right credentials work
//! (user + password, token, and in the URL), wrong or missing ones are refused with one line
//! that never echoes the secret.

use lineage_bus::{connect_with, NatsAuth, NatsConnect};
use lineage_testkit::{NatsOptions, NatsServer};

fn server() -> NatsServer {
    NatsServer::start_with(NatsOptions {
        extra_config:
            "authorization {\n  users = [ { user: \"alice\", password: \"Right-horse-42\" } ]\n}\n"
                .into(),
        ..NatsOptions::default()
    })
    .expect("nats-server with authorization")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn z1_credentials_are_required_and_never_echoed() {
    let server = server();
    let url = server.url();
    let mut how = NatsConnect::plain(&url, "z1");

    // No credentials: refused.
    let err = connect_with(&how).await.unwrap_err().to_string();
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(err.to_ascii_lowercase().contains("author"), "{err}");
    assert!(err.contains("check the NATS credentials"), "{err}");

    // A wrong password, as a setting and in the URL: refused, the password nowhere.
    how.auth = NatsAuth::UserPassword {
        user: "alice".into(),
        password: "Wrong-pony-7".into(),
    };
    let err = connect_with(&how).await.unwrap_err().to_string();
    assert!(!err.contains("Wrong-pony-7"), "{err}");
    let in_url = NatsConnect::plain(&url.replace("nats://", "nats://alice:Wrong-pony-7@"), "z1");
    let err = connect_with(&in_url).await.unwrap_err().to_string();
    assert!(!err.contains("Wrong-pony-7"), "{err}");
    assert!(err.contains("alice:<redacted>@"), "{err}");

    // The right one works.
    how.auth = NatsAuth::UserPassword {
        user: "alice".into(),
        password: "Right-horse-42".into(),
    };
    let client = connect_with(&how).await.expect("right credentials");
    client.flush().await.unwrap();

    // TLS required against a server without TLS: refused, no plaintext fallback.
    how.tls.required = true;
    let err = connect_with(&how).await.unwrap_err().to_string();
    assert!(err.to_ascii_lowercase().contains("tls"), "{err}");
}
