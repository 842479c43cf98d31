//! [`Jaeger`]: a real trace collector for the trace suites (issue 36, U2). Jaeger v1.75.0's
//! all-in-one (an OpenTelemetry Collector build: OTLP receivers, in-memory storage, the query
//! API), built by `scripts/install-deps.sh` from the Go tool pinned in `tools/jaeger`, started on
//! free loopback ports from a config written here, and read back through its query API
//! (`/api/traces/{id}`, what its UI reads).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::{free_port, wait_for};

/// Where `scripts/install-deps.sh` puts the binary.
pub fn jaeger_bin() -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join("go/bin/jaeger-v1.75.0")
}

/// TLS on the OTLP gRPC receiver: the server's certificate and key (PEM files).
pub struct ReceiverTls {
    /// The certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

/// A Jaeger process on free loopback ports, stopped (by pid) on drop.
pub struct Jaeger {
    child: Child,
    dir: tempfile::TempDir,
    /// OTLP over gRPC: `127.0.0.1:port`.
    pub grpc: String,
    /// OTLP over HTTP: `http://127.0.0.1:port` (the exporter appends `/v1/traces`).
    pub http: String,
    query: u16,
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Jaeger {
    /// Starts Jaeger (TLS on its gRPC receiver when `tls` is given) and waits for its query
    /// API. Panics with what to run when the binary is missing.
    pub fn start(tls: Option<ReceiverTls>) -> Jaeger {
        let bin = jaeger_bin();
        assert!(
            bin.is_file(),
            "{} is missing: run scripts/install-deps.sh (it builds Jaeger from tools/jaeger)",
            bin.display()
        );
        let dir = tempfile::tempdir().expect("a temp dir");
        let [grpc, http, query, query_grpc] = [(); 4].map(|_| free_port().expect("a free port"));
        let grpc_tls = tls
            .map(|t| {
                format!(
                    "\n        tls:\n          cert_file: {}\n          key_file: {}",
                    t.cert.display(),
                    t.key.display()
                )
            })
            .unwrap_or_default();
        let config = format!(
            r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memory
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memory:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}{grpc_tls}
      http:
        endpoint: 127.0.0.1:{http}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
"#
        );
        let config_path = dir.path().join("jaeger.yaml");
        std::fs::write(&config_path, config).expect("write the config");
        let log = std::fs::File::create(dir.path().join("jaeger.log")).expect("a log file");
        let child = Command::new(&bin)
            .arg("--config")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start jaeger");
        let jaeger = Jaeger {
            child,
            dir,
            grpc: format!("127.0.0.1:{grpc}"),
            http: format!("http://127.0.0.1:{http}"),
            query,
        };
        wait_for(Duration::from_secs(30), "Jaeger's query API", || {
            jaeger.get("/api/services").ok()
        });
        jaeger
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("jaeger.log")).unwrap_or_default()
    }

    fn get(&self, path: &str) -> std::io::Result<Value> {
        let url = format!("http://127.0.0.1:{}{path}", self.query);
        let (code, body) = crate::nats::http("GET", &url, None)?;
        if code != 200 {
            return Err(std::io::Error::other(format!("{url}: {code} {body}")));
        }
        serde_json::from_str(&body).map_err(std::io::Error::other)
    }

    /// The trace `trace_id` (32 hex digits) as the query API returns it, or `None` when the
    /// collector has none.
    pub fn trace(&self, trace_id: &str) -> Option<Trace> {
        let found = self.get(&format!("/api/traces/{trace_id}")).ok()?;
        let trace = found["data"].as_array()?.first()?.clone();
        Some(Trace(trace))
    }
}

impl Jaeger {
    /// The latest traces (at most 50) of `service` that hold a span named `operation`.
    pub fn search(&self, service: &str, operation: &str) -> Vec<Trace> {
        let path = format!("/api/traces?service={service}&operation={operation}&limit=50");
        self.get(&path)
            .ok()
            .and_then(|found| found["data"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .map(Trace)
            .collect()
    }
}

/// One trace from the query API.
#[derive(Debug, Clone)]
pub struct Trace(pub Value);

/// One span of a [`Trace`].
#[derive(Debug, Clone)]
pub struct Span {
    /// Its id (16 hex digits).
    pub id: String,
    /// Its parent's id, when it has one.
    pub parent: Option<String>,
    /// Its name.
    pub name: String,
    /// Its tags (attributes, the span kind and status as Jaeger spells them).
    pub tags: Vec<(String, Value)>,
    /// The `lineage.node` of the process that sent it.
    pub node: Option<String>,
    /// The `service.name` of that process.
    pub service: String,
}

impl Span {
    /// A tag's value.
    pub fn tag(&self, key: &str) -> Option<&Value> {
        self.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A tag's value as text.
    pub fn text(&self, key: &str) -> Option<String> {
        self.tag(key).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

impl Trace {
    /// Its spans, with the process they came from.
    pub fn spans(&self) -> Vec<Span> {
        let processes = &self.0["processes"];
        let tags = |v: &Value| -> Vec<(String, Value)> {
            v.as_array()
                .map(|tags| {
                    tags.iter()
                        .map(|t| {
                            (
                                t["key"].as_str().unwrap_or("").to_owned(),
                                t["value"].clone(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        self.0["spans"]
            .as_array()
            .map(|spans| {
                spans
                    .iter()
                    .map(|s| {
                        let process = &processes[s["processID"].as_str().unwrap_or("")];
                        let process_tags = tags(&process["tags"]);
                        Span {
                            id: s["spanID"].as_str().unwrap_or("").to_owned(),
                            parent: s["references"].as_array().and_then(|refs| {
                                refs.iter()
                                    .find(|r| r["refType"] == "CHILD_OF")
                                    .and_then(|r| r["spanID"].as_str())
                                    .map(str::to_owned)
                            }),
                            name: s["operationName"].as_str().unwrap_or("").to_owned(),
                            tags: tags(&s["tags"]),
                            node: process_tags
                                .iter()
                                .find(|(k, _)| k == "lineage.node")
                                .and_then(|(_, v)| v.as_str())
                                .map(str::to_owned),
                            service: process["serviceName"].as_str().unwrap_or("").to_owned(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The spans from `span` up through its parents, as far as the trace holds them.
pub fn ancestry<'a>(spans: &'a [Span], span: &'a Span) -> Vec<&'a Span> {
    let mut chain = vec![span];
    let mut at = span;
    while let Some(parent) = at
        .parent
        .as_ref()
        .and_then(|p| spans.iter().find(|s| &s.id == p))
    {
        chain.push(parent);
        at = parent;
        assert!(chain.len() < 128, "a cycle in the parent links");
    }
    chain
}
