//! The peers' processes: where the script installed them, starting one in its own process
//! group on loopback (stopped by its pid's group when dropped), waiting for a port, a minimal
//! HTTP POST, and running a driver that prints one JSON line of samples.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench::Samples;

/// Where `scripts/bench-peers.sh` installs the peers and where their driver sources are.
pub(super) struct Install {
    /// The cache dir: `bin/` (restate-server, etcd, temporal, peers-load) and `venv/`.
    pub dir: PathBuf,
    /// The drivers' sources (`benches/peers`).
    pub src: PathBuf,
}

impl Install {
    /// `LINEAGE_PEERS_DIR`, else the repository's `target/peers`; `LINEAGE_PEERS_SRC`, else the
    /// repository's `benches/peers`.
    pub fn locate() -> Install {
        let root = lineage_testkit::workspace_root();
        let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
        Install {
            dir: env("LINEAGE_PEERS_DIR").unwrap_or_else(|| root.join("target/peers")),
            src: env("LINEAGE_PEERS_SRC").unwrap_or_else(|| root.join("benches/peers")),
        }
    }

    /// An installed program (`bin/NAME`, or `venv/bin/NAME` with `venv`), or why it is missing.
    pub fn program(&self, name: &str) -> Result<PathBuf, String> {
        let path = if name == "python" || name == "hypercorn" {
            self.dir.join("venv/bin").join(name)
        } else {
            self.dir.join("bin").join(name)
        };
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{} is not installed (run scripts/bench-peers.sh)",
                path.display()
            ))
        }
    }

    /// A driver source file, or why it is missing.
    pub fn source(&self, name: &str) -> Result<PathBuf, String> {
        let path = self.src.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{} is missing", path.display()))
        }
    }
}

/// A started peer process, in a process group of its own (its pid's); dropping it sends
/// SIGTERM to that group, then SIGKILL after 3 s, and reaps the process.
pub(super) struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `program args` in `dir` with `env`, stdout and stderr to `dir/NAME.log`.
    pub fn start(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        dir: &Path,
    ) -> Result<Proc, String> {
        use std::os::unix::process::CommandExt;
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        Ok(Proc {
            name: name.to_owned(),
            child,
            log,
        })
    }

    /// The last lines of its log, for a failure message.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        lineage_testkit::cluster::tail(&text, 5)
    }

    /// Waits (up to `limit`) until `port` on 127.0.0.1 accepts connections; fails at once if
    /// the process exited.
    pub async fn wait_port(&mut self, port: u16, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{} exited ({status}): {}", self.name, self.tail()));
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} did not listen on port {port} within {limit:?}: {}",
                    self.name,
                    self.tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let Ok(pgid) = i32::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill(2) with the negated pid of a process this bench started in its own
        // process group: signals that group only.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                // The leader is gone; its helpers (hypercorn's worker) go with the group.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: as above.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// `n` distinct free loopback ports.
pub(super) fn ports(n: usize) -> Result<Vec<u16>, String> {
    let mut out: Vec<u16> = Vec::with_capacity(n);
    for _ in 0..n * 4 {
        if out.len() == n {
            break;
        }
        let p = lineage_testkit::free_port().map_err(|e| format!("no free port: {e}"))?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.len() == n {
        Ok(out)
    } else {
        Err("not enough free ports".into())
    }
}

/// One POST of a JSON body to 127.0.0.1:`port` (`lineage_testkit::http_within`), with a 30 s
/// timeout: the status code and the body.
pub(super) fn http_post(port: u16, path: &str, body: &str) -> Result<(u16, String), String> {
    let url = format!("http://127.0.0.1:{port}{path}");
    lineage_testkit::http_within("POST", &url, Some(body), Duration::from_secs(30))
        .map_err(|e| e.to_string())
}

/// Runs a driver (a fixed program of the install) to completion, up to `limit` (then kills it),
/// and parses its JSON line.
pub(super) async fn run_driver(
    program: &Path,
    args: &[String],
    limit: Duration,
) -> Result<Samples, String> {
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| format!("{} did not finish within {limit:?}", program.display()))?
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    parse_driver_line(&stdout).map_err(|e| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        format!(
            "{e} ({}); stderr: {}",
            out.status,
            lineage_testkit::cluster::tail(&stderr, 3)
        )
    })
}

/// The last JSON line of a driver's stdout: `{"n", "wall_s", "latencies_us": [...]}` as
/// samples, or its `{"error"}` as the error.
pub(super) fn parse_driver_line(stdout: &str) -> Result<Samples, String> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or("the driver printed no JSON line")?;
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("driver output is not JSON: {e}"))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        return Err(format!("driver error: {e}"));
    }
    let wall = v
        .get("wall_s")
        .and_then(|w| w.as_f64())
        .filter(|w| w.is_finite() && *w >= 0.0)
        .ok_or("driver output has no wall_s")?;
    let latencies: Vec<Duration> = v
        .get("latencies_us")
        .and_then(|l| l.as_array())
        .ok_or("driver output has no latencies_us")?
        .iter()
        .map(|x| x.as_u64().map(Duration::from_micros))
        .collect::<Option<_>>()
        .ok_or("a latency is not a whole number of microseconds")?;
    if latencies.is_empty() {
        return Err("the driver measured nothing".into());
    }
    Ok(Samples {
        latencies,
        wall: Duration::from_secs_f64(wall),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_line_parses_into_samples_and_an_error_line_into_its_reason() {
        let out = "warming up\n{\"n\": 3, \"wall_s\": 0.5, \"latencies_us\": [1000, 3000, 2000]}\n";
        let s = parse_driver_line(out).unwrap();
        assert_eq!(s.latencies.len(), 3);
        assert_eq!(s.p50(), Duration::from_millis(2));
        assert_eq!(s.wall, Duration::from_millis(500));
        assert!((s.throughput() - 6.0).abs() < 1e-9);
        let Err(err) = parse_driver_line("{\"error\": \"ConnectError: refused\"}") else {
            panic!("an error line parsed as samples");
        };
        assert!(err.contains("refused"), "{err}");
        assert!(parse_driver_line("no json").is_err());
        assert!(parse_driver_line("{\"wall_s\": 1, \"latencies_us\": [1.5]}").is_err());
    }
}
