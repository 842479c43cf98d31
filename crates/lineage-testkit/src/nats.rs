//! The local `nats-server` of `lineage dev` and the suites ([`NatsServer`], moved to
//! `lineage_bus::local_server` so that the product does not link the test kit), and
//! [`http_get`], a plain HTTP/1.0 GET for monitoring ports.

use std::io;
use std::net::TcpStream;
use std::time::Duration;

pub use lineage_bus::local_server::{
    free_port, greeting, nats_server_binary, NatsOptions, NatsServer,
};

/// `GET path` (HTTP/1.0: no chunked body) on `127.0.0.1:port`, say a nats-server monitoring
/// port: status code and body.
pub fn http_get(port: u16, path: &str) -> io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let request = format!("GET {path} HTTP/1.0\r\nhost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| io::Error::other(format!("not an HTTP reply on port {port}: {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}
