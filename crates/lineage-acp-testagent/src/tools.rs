//! The test agent's MCP client (issue 11): it calls the tools of the MCP servers its
//! `session/new` declared, as a real agent calls lineage's delegation tools.
//!
//! A prompt line `tool: NAME {json arguments}` is a directive: the agent connects to the server
//! named `lineage` with the official Rust MCP SDK's client (a stdio entry: it starts the command
//! with its arguments and environment as declared and talks over its stdio; an HTTP entry, given
//! to an agent started with `--mcp-http`, which then declares `mcpCapabilities.http`: streamable
//! HTTP to the URL with the declared headers), calls tool NAME, and its reply line
//! is `tool NAME: <result text>` (`tool NAME error: <text>` for a tool error or a failure).
//! `$child` in the arguments stands for the last child a `spawn_subagent` of this session
//! returned, so one prompt can spawn a child and then talk to it. A line `tool-bench: N NAME
//! {json}` (for `lineage bench tools`) calls the tool N times over one MCP connection, one call
//! at a time, and replies `tool-bench NAME: {"micros": [...], "errors": [...]}` with each call's
//! duration as the agent saw it.

use std::process::Stdio;

use agent_client_protocol::v1::schema::McpServer;
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use serde_json::Value;

/// A stdio MCP server a session was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioServer {
    /// Its name in `mcpServers`.
    pub name: String,
    /// The program.
    pub command: std::path::PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its environment (added to the agent's).
    pub env: Vec<(String, String)>,
}

/// An MCP server a session was given over streamable HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpServer {
    /// Its name in `mcpServers`.
    pub name: String,
    /// The endpoint.
    pub url: String,
    /// The headers to send (name, value).
    pub headers: Vec<(String, String)>,
}

/// An MCP server of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolServer {
    /// Started as a process, spoken to over its stdio.
    Stdio(StdioServer),
    /// Reached over streamable HTTP.
    Http(HttpServer),
}

impl ToolServer {
    fn name(&self) -> &str {
        match self {
            ToolServer::Stdio(s) => &s.name,
            ToolServer::Http(s) => &s.name,
        }
    }
}

/// The servers of a `session/new` or `session/load` this agent uses: with `http_only` (it
/// declared `mcpCapabilities.http`) only the HTTP entries, so a test sees which transport the
/// node chose; SSE entries never (it does not declare `mcpCapabilities.sse`).
pub fn servers(servers: &[McpServer], http_only: bool) -> Vec<ToolServer> {
    servers
        .iter()
        .filter(|s| !http_only || matches!(s, McpServer::Http(_)))
        .filter_map(|s| match s {
            McpServer::Stdio(s) => Some(ToolServer::Stdio(StdioServer {
                name: s.name.clone(),
                command: s.command.clone(),
                args: s.args.clone(),
                env: s
                    .env
                    .iter()
                    .map(|v| (v.name.clone(), v.value.clone()))
                    .collect(),
            })),
            McpServer::Http(s) => Some(ToolServer::Http(HttpServer {
                name: s.name.clone(),
                url: s.url.clone(),
                headers: s
                    .headers
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            })),
            _ => None,
        })
        .collect()
}

/// What the session was given, one line a server (header values as their lengths only).
pub fn describe(servers: &[ToolServer]) -> String {
    let mut lines = vec!["mcp servers:".to_owned()];
    for server in servers {
        lines.push(match server {
            ToolServer::Stdio(s) => format!("{} stdio {}", s.name, s.command.display()),
            ToolServer::Http(s) => {
                let headers: Vec<String> = s
                    .headers
                    .iter()
                    .map(|(n, v)| format!("{n}=<{} chars>", v.len()))
                    .collect();
                format!("{} http {} [{}]", s.name, s.url, headers.join(", "))
            }
        });
    }
    lines.join("\n")
}

/// The `tool:` directive lines of a prompt, in order (parsed when they run: see [`parse`]).
pub fn directives(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("tool:"))
        .map(|rest| rest.trim().to_owned())
        .collect()
}

/// A `tool-bench: N NAME {json}` line: (N, the directive after N).
pub fn bench_directive(text: &str) -> Option<(usize, String)> {
    let rest = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("tool-bench:"))?
        .trim();
    let (n, directive) = rest.split_once(' ')?;
    Some((n.parse().ok()?, directive.trim().to_owned()))
}

/// Calls `name` `n` times over one connection; the reply line with each call's duration.
pub async fn bench(servers: &[ToolServer], n: usize, name: &str, args: Value) -> String {
    let outcome = async {
        let (client, child) = connect(servers).await?;
        let Value::Object(arguments) = args else {
            return Err("tool arguments must be a JSON object".to_owned());
        };
        let mut micros = Vec::with_capacity(n);
        let mut errors = Vec::new();
        for _ in 0..n {
            let started = std::time::Instant::now();
            let result = client
                .call_tool(
                    CallToolRequestParams::new(name.to_owned()).with_arguments(arguments.clone()),
                )
                .await;
            micros.push(started.elapsed().as_micros() as u64);
            match result {
                Ok(r) if r.is_error != Some(true) => {}
                Ok(r) => errors.push(text_of(&r)),
                Err(e) => errors.push(e.to_string()),
            }
        }
        let _ = client.cancel().await;
        if let Some(mut child) = child {
            let _ = child.kill().await;
        }
        Ok(serde_json::json!({"micros": micros, "errors": errors}))
    }
    .await;
    match outcome {
        Ok(body) => format!("tool-bench {name}: {body}"),
        Err(e) => format!("tool-bench {name} error: {e}"),
    }
}

/// One directive, with `$child` replaced by `last_child`: (tool name, arguments).
pub fn parse(directive: &str, last_child: Option<&str>) -> Result<(String, Value), String> {
    let (name, args) = directive.split_once(' ').unwrap_or((directive, "{}"));
    let args = match last_child {
        Some(child) => args.replace("$child", child),
        None => args.to_owned(),
    };
    serde_json::from_str::<Value>(args.trim())
        .map(|args| (name.to_owned(), args))
        .map_err(|e| format!("tool {name} error: its arguments are not JSON: {e}"))
}

/// The child id in a `spawn_subagent` result line, if any.
pub fn child_of(line: &str) -> Option<String> {
    let body = line.strip_prefix("tool spawn_subagent: ")?;
    let value: Value = serde_json::from_str(body).ok()?;
    value["child"].as_str().map(str::to_owned)
}

/// Calls `name` with `args` on the server named `lineage`; the reply line.
pub async fn call(servers: &[ToolServer], name: &str, args: Value) -> String {
    match call_inner(servers, name, args).await {
        Ok((false, text)) => format!("tool {name}: {text}"),
        Ok((true, text)) => format!("tool {name} error: {text}"),
        Err(e) => format!("tool {name} error: {e}"),
    }
}

/// Connects the MCP client to the server named `lineage`: starts it and speaks over its
/// stdio, or over streamable HTTP; the process, if one was started.
async fn connect(
    servers: &[ToolServer],
) -> Result<
    (
        rmcp::service::RunningService<rmcp::RoleClient, ()>,
        Option<tokio::process::Child>,
    ),
    String,
> {
    let server = servers
        .iter()
        .find(|s| s.name() == "lineage")
        .ok_or("no MCP server named lineage in this session")?;
    let server = match server {
        ToolServer::Stdio(server) => server,
        ToolServer::Http(server) => return connect_http(server).await.map(|c| (c, None)),
    };
    let mut child = tokio::process::Command::new(&server.command)
        .args(&server.args)
        .envs(server.env.iter().cloned())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", server.command.display()))?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the MCP server has no stdio".into());
    };
    let client =
        ().serve((stdout, stdin))
            .await
            .map_err(|e| format!("MCP initialize failed: {e}"))?;
    Ok((client, Some(child)))
}

/// The MCP client over streamable HTTP (`Authorization: Bearer` as the transport's auth).
async fn connect_http(
    server: &HttpServer,
) -> Result<rmcp::service::RunningService<rmcp::RoleClient, ()>, String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.clone());
    for (name, value) in &server.headers {
        if name.eq_ignore_ascii_case("authorization") {
            let token = value.strip_prefix("Bearer ").unwrap_or(value);
            config = config.auth_header(token.to_owned());
        } else {
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| format!("bad header name {name:?}: {e}"))?;
            let value =
                http::HeaderValue::from_str(value).map_err(|e| format!("bad header value: {e}"))?;
            config.custom_headers.insert(name, value);
        }
    }
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
    ().serve(transport)
        .await
        .map_err(|e| format!("MCP initialize over HTTP failed: {e}"))
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

async fn call_inner(
    servers: &[ToolServer],
    name: &str,
    args: Value,
) -> Result<(bool, String), String> {
    let (client, child) = connect(servers).await?;
    let Value::Object(arguments) = args else {
        return Err("tool arguments must be a JSON object".into());
    };
    let result = client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(arguments))
        .await
        .map_err(|e| format!("tools/call failed: {e}"));
    let _ = client.cancel().await;
    if let Some(mut child) = child {
        let _ = child.kill().await;
    }
    let result = result?;
    Ok((result.is_error == Some(true), text_of(&result)))
}
