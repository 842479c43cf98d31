//! The editor's `mcpServers` a `session/new` forwards in its spawn (issue 38): the ones reached
//! over HTTP; the node gives them to the root's agent when its profile passes them.

/// The editor's MCP servers a spawn may carry to the root agent: those reached over HTTP (the
/// node gives them to the agent when the profile says `pass_mcp_servers = true`). A stdio
/// server is a program on the editor's machine, and an SSE one a transport agents need not
/// take: they stay with the editor (named in a debug line; headers are never logged).
pub(super) fn editor_servers(
    servers: &[agent_client_protocol::v1::schema::McpServer],
) -> Vec<lineage_protocol::editor_mcp::PassedMcpServer> {
    use agent_client_protocol::v1::schema::McpServer;
    use lineage_protocol::editor_mcp::{PassedHeader, PassedMcpServer};
    servers
        .iter()
        .filter_map(|server| match server {
            McpServer::Http(http) => Some(PassedMcpServer {
                name: http.name.clone(),
                url: http.url.clone(),
                headers: http
                    .headers
                    .iter()
                    .map(|h| PassedHeader {
                        name: h.name.clone(),
                        value: h.value.clone(),
                    })
                    .collect(),
            }),
            McpServer::Stdio(stdio) => {
                tracing::debug!(server = %stdio.name, "an editor's stdio MCP server stays with the editor");
                None
            }
            McpServer::Sse(sse) => {
                tracing::debug!(server = %sse.name, "an editor's SSE MCP server stays with the editor");
                None
            }
            _ => None,
        })
        .collect()
}
