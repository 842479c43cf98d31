//! An editor's MCP servers passed on to the root agent of its ACP session (issue 38): the
//! `mcpServers` of the editor's `session/new` that the front door (`lineage acp`) may forward
//! in the spawn, and the node hands to the hosted root agent next to lineage's own tools, when
//! its profile says `pass_mcp_servers = true`.
//!
//! Only servers reached over HTTP are passed: a stdio entry is a program to run, and nothing
//! from the wire chooses a program a node runs. Their headers often carry the editor's
//! credentials, so they are never written down: not in the session's log, not in a log line
//! (`Debug` shows header names only), and a cold resume elsewhere starts the agent without them.

use serde::{Deserialize, Serialize};

/// The most servers one spawn may pass.
pub const MAX_PASSED_SERVERS: usize = 16;

/// The name lineage's own tools server has in every hosted agent's `mcpServers`.
pub const RESERVED_NAME: &str = "lineage";

/// One HTTP header of a passed server.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PassedHeader {
    /// The header's name.
    pub name: String,
    /// Its value (a credential, often: never logged).
    pub value: String,
}

/// An MCP server reached over streamable HTTP, as the editor declared it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PassedMcpServer {
    /// Its name in `mcpServers` (not `lineage`: that is the delegation tools').
    pub name: String,
    /// Its `http://` or `https://` URL.
    pub url: String,
    /// Headers to send it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<PassedHeader>,
}

impl std::fmt::Debug for PassedHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassedHeader")
            .field("name", &self.name)
            .field("value", &"<redacted>")
            .finish()
    }
}

impl std::fmt::Debug for PassedMcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassedMcpServer")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("headers", &self.headers)
            .finish()
    }
}

/// Checks servers a spawn passes; one line for the first one wrong.
pub fn check_passed_servers(servers: &[PassedMcpServer]) -> Result<(), String> {
    if servers.len() > MAX_PASSED_SERVERS {
        return Err(format!(
            "mcp_servers passes {} servers; at most {MAX_PASSED_SERVERS}",
            servers.len()
        ));
    }
    for (i, s) in servers.iter().enumerate() {
        let name_ok = !s.name.is_empty()
            && s.name.len() <= 64
            && s.name.chars().all(|c| c.is_ascii_graphic());
        if !name_ok || s.name == RESERVED_NAME {
            return Err(format!(
                "mcp_servers[{i}].name {:?} must be 1 to 64 printable ASCII characters and not {RESERVED_NAME:?} (lineage's own tools)",
                s.name
            ));
        }
        if servers[..i].iter().any(|o| o.name == s.name) {
            return Err(format!(
                "mcp_servers[{i}].name {:?} is given twice; names must differ",
                s.name
            ));
        }
        let scheme_ok = s.url.starts_with("http://") || s.url.starts_with("https://");
        if !scheme_ok || s.url.len() > 2048 || s.url.chars().any(char::is_whitespace) {
            return Err(format!(
                "mcp_servers[{i}].url of {:?} is not an http(s) URL; only servers reached over HTTP are passed",
                s.name
            ));
        }
        for h in &s.headers {
            let name_ok = !h.name.is_empty()
                && h.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c));
            if !name_ok || h.value.contains(['\r', '\n']) {
                return Err(format!(
                    "mcp_servers[{i}] ({:?}) has a header that is not a token name with a one-line value",
                    s.name
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, url: &str) -> PassedMcpServer {
        PassedMcpServer {
            name: name.to_owned(),
            url: url.to_owned(),
            headers: vec![PassedHeader {
                name: "Authorization".to_owned(),
                value: "Bearer s3cret".to_owned(),
            }],
        }
    }

    #[test]
    fn editor_servers_are_http_named_apart_and_never_show_their_header_values() {
        assert!(check_passed_servers(&[server("docs", "https://docs.example.com/mcp")]).is_ok());
        for bad in [
            vec![server("lineage", "https://x.example.com/")],
            vec![server("", "https://x.example.com/")],
            vec![server("a", "file:///etc/passwd")],
            vec![server("a", "https://x/"), server("a", "https://y/")],
        ] {
            let why = check_passed_servers(&bad).unwrap_err();
            assert!(!why.contains('\n') && !why.contains("s3cret"), "{why}");
        }
        let mut injected = server("a", "https://x/");
        injected.headers[0].value = "x\r\nHost: evil".to_owned();
        assert!(check_passed_servers(&[injected]).is_err());
        let shown = format!("{:?}", server("docs", "https://docs.example.com/mcp"));
        assert!(
            shown.contains("Authorization") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
