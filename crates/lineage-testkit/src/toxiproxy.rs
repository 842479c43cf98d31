//! [`Toxiproxy`]: a real `toxiproxy-server` (Shopify's TCP fault proxy) on a free loopback
//! port, driven through its HTTP API, for the network fault suites (issue 12). A node given the
//! proxy's listen address instead of nats-server's reaches NATS only through it, so the test can
//! slow, blackhole, reset or cut that one link. [`toxiproxy`] finds the server binary
//! (`scripts/install-deps.sh` installs it) or installs it with `go install`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::{free_port, wait_for};

/// toxiproxy-server on PATH or in `~/go/bin`, installing it with `go install` when it can.
pub fn toxiproxy() -> Option<PathBuf> {
    let find = || {
        let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("toxiproxy-server"))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(home) = std::env::var_os("HOME") {
            candidates.push(Path::new(&home).join("go/bin/toxiproxy-server"));
        }
        candidates.into_iter().find(|p| p.is_file())
    };
    if let Some(found) = find() {
        return Some(found);
    }
    let status = Command::new("bash")
        .args(["-c", "GOBIN=\"$HOME/go/bin\" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0 && mv \"$HOME/go/bin/server\" \"$HOME/go/bin/toxiproxy-server\""])
        .status()
        .ok()?;
    status.success().then(find).flatten()
}

/// A toxiproxy-server process on a free loopback port, stopped (by pid) on drop.
pub struct Toxiproxy {
    child: Child,
    api: u16,
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Toxiproxy {
    /// Starts `bin` on a free loopback port and waits for its API.
    pub fn start(bin: &Path) -> Toxiproxy {
        let api = free_port().expect("a free port");
        let child = Command::new(bin)
            .args(["-host", "127.0.0.1", "-port", &api.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start toxiproxy-server");
        let proxy = Toxiproxy { child, api };
        wait_for(Duration::from_secs(10), "toxiproxy's API", || {
            proxy.call("GET", "/version", "").ok()
        });
        proxy
    }

    /// One HTTP call to the API: (status, body).
    pub fn call(&self, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
        let url = format!("http://127.0.0.1:{}{path}", self.api);
        crate::nats::http(method, &url, (!body.is_empty()).then_some(body))
    }

    /// One API call that must succeed. A connection reset (seen in CI right after the API
    /// answered) is retried, at most five times; a retried create that answers 409, or a
    /// retried delete that answers 404, had been applied by the reset attempt.
    pub fn ok(&self, method: &str, path: &str, body: Value) {
        let mut attempt = 0;
        let (code, text) = loop {
            attempt += 1;
            match self.call(method, path, &body.to_string()) {
                Ok(reply) => break reply,
                Err(e) if attempt < 5 => {
                    eprintln!("toxiproxy API {method} {path}: {e}; again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("toxiproxy API {method} {path}: {e}"),
            }
        };
        // A retried create that answers 409, or a retried delete that answers 404, had been
        // applied by the attempt whose connection was reset.
        let applied_before = attempt > 1
            && ((method == "POST" && code == 409) || (method == "DELETE" && code == 404));
        assert!(
            (200..300).contains(&code) || applied_before,
            "{method} {path}: {code} {text}"
        );
    }
}

impl Toxiproxy {
    /// [`toxiproxy`] started, or `None` after printing why the calling test skips.
    pub fn start_or_skip() -> Option<Toxiproxy> {
        match toxiproxy() {
            Some(bin) => Some(Toxiproxy::start(&bin)),
            None => {
                println!(
                    "skipped: toxiproxy-server is not installed and `go install` could not install it"
                );
                None
            }
        }
    }

    /// A new proxy `name` to `upstream` (`host:port`) on a free loopback port; returns the port
    /// to connect to instead of `upstream`.
    pub fn proxy_to(&self, name: &str, upstream: &str) -> u16 {
        let listen = free_port().expect("a free port");
        self.ok(
            "POST",
            "/proxies",
            serde_json::json!({"name": name, "listen": format!("127.0.0.1:{listen}"), "upstream": upstream}),
        );
        listen
    }

    /// Adds `toxics` (toxiproxy's toxic objects, each with a unique `name`) to proxy `proxy`.
    pub fn add_toxics(&self, proxy: &str, toxics: &[Value]) {
        for toxic in toxics {
            self.ok("POST", &format!("/proxies/{proxy}/toxics"), toxic.clone());
        }
    }

    /// Removes `toxics` (as given to [`Toxiproxy::add_toxics`]) from proxy `proxy`.
    pub fn remove_toxics(&self, proxy: &str, toxics: &[Value]) {
        for toxic in toxics {
            let name = toxic["name"].as_str().unwrap_or_default();
            self.ok(
                "DELETE",
                &format!("/proxies/{proxy}/toxics/{name}"),
                serde_json::json!({}),
            );
        }
    }

    /// Enables or disables proxy `proxy` (disabled: its connections are cut and new ones
    /// refused).
    pub fn set_enabled(&self, proxy: &str, enabled: bool) {
        self.ok(
            "POST",
            &format!("/proxies/{proxy}"),
            serde_json::json!({"enabled": enabled}),
        );
    }
}

/// A toxic of `kind` with `attributes` on both directions of a proxy: two toxic objects named
/// `<name>-downstream` and `<name>-upstream`.
pub fn both_ways(name: &str, kind: &str, attributes: Value) -> Vec<Value> {
    ["downstream", "upstream"]
        .iter()
        .map(|stream| {
            serde_json::json!({"name": format!("{name}-{stream}"), "type": kind,
                "stream": stream, "attributes": attributes.clone()})
        })
        .collect()
}
