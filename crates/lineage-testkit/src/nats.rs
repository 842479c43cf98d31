//! The local `nats-server` of `lineage dev` and the suites ([`NatsServer`], moved to
//! `lineage_bus::local_server` so that the product does not link the test kit), and [`http`],
//! the suites' HTTP client (`ureq`).

use std::io;
use std::time::Duration;

pub use lineage_bus::local_server::{
    free_port, greeting, nats_server_binary, NatsOptions, NatsServer,
};

/// `GET path` on `127.0.0.1:port` (a nats-server monitoring port, a node's endpoints):
/// status code and body ([`http`]).
pub fn http_get(port: u16, path: &str) -> io::Result<(u16, String)> {
    http("GET", &format!("http://127.0.0.1:{port}{path}"), None)
}

/// One HTTP call with `ureq` (connect 500 ms, 5 s in all; any status is an answer): status
/// code and body. `body` goes as JSON.
pub fn http(method: &str, url: &str, body: Option<&str>) -> io::Result<(u16, String)> {
    http_within(method, url, body, Duration::from_secs(5))
}

/// [`http`] with `within` for the whole call.
pub fn http_within(
    method: &str,
    url: &str,
    body: Option<&str>,
    within: Duration,
) -> io::Result<(u16, String)> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_millis(500)))
        .timeout_global(Some(within))
        .http_status_as_error(false)
        .build()
        .into();
    let json = |r: ureq::RequestBuilder<ureq::typestate::WithBody>| {
        r.header("content-type", "application/json")
            .send(body.unwrap_or_default())
    };
    let reply = match method {
        "GET" => agent.get(url).call(),
        "DELETE" => agent.delete(url).call(),
        "POST" => json(agent.post(url)),
        "PATCH" => json(agent.patch(url)),
        "PUT" => json(agent.put(url)),
        other => return Err(io::Error::other(format!("no HTTP method {other}"))),
    };
    let mut reply = reply.map_err(io::Error::other)?;
    let code = reply.status().as_u16();
    let text = reply
        .body_mut()
        .read_to_string()
        .map_err(io::Error::other)?;
    Ok((code, text))
}
