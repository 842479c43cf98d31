//! The test agent's shell tool: a prompt line `sh: COMMAND` runs `COMMAND` with `/bin/sh -c`
//! in the session's working directory and environment, as a real agent's shell tool does
//! (Claude Code's Bash, Codex's exec), and its reply line is `sh exit CODE:` followed by the
//! command's stdout and stderr. The command also gets the environment of the session's stdio
//! MCP servers, as the processes a real agent starts for them have it (`lineage mcp` holds its
//! session's tools secret for the session's whole life), so a test has a process of the session
//! that holds the secret. Tests use it as a hosted agent gone rogue (V1, V2): what a prompt
//! injection could make any shell-running agent do.

/// The `sh:` lines of a prompt, in order.
pub fn directives(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("sh:"))
        .map(|command| command.trim().to_owned())
        .collect()
}

/// Runs one command with the environment of the session's stdio `servers` added; its reply
/// text.
pub async fn run(command: &str, servers: &[crate::tools::ToolServer]) -> String {
    let env = servers.iter().flat_map(|s| match s {
        crate::tools::ToolServer::Stdio(s) => s.env.clone(),
        crate::tools::ToolServer::Http(_) => Vec::new(),
    });
    let out = tokio::process::Command::new("/bin/sh")
        .args(["-c", command])
        .envs(env)
        .stdin(std::process::Stdio::null())
        .output()
        .await;
    match out {
        Ok(out) => format!(
            "sh exit {}:\n{}{}",
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => format!("sh error: cannot run /bin/sh: {e}"),
    }
}
