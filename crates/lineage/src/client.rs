//! What the verbs, the front door and the local cluster share to talk to a cluster: a NATS
//! connection with the CLI's credentials ([`connect`]), a [`ControlClient`] ([`control`]),
//! registry errors as control errors, and small helpers (ids, time, JSON output, signals).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::ControlClient;
use lineage_core::ids::SessionId;
use lineage_registry::RegistryError;

use crate::global::{subjects, Global};
use crate::output::usage;

/// A NATS connection for the CLI, authenticated as the flags, `NATS_*` and the natscli
/// context say; `unavailable` after 5 s. The one in `g.shared_nats` when there is one.
pub async fn connect(g: &Global) -> Result<async_nats::Client, ControlError> {
    if let Some(shared) = &g.shared_nats {
        return Ok(shared.clone());
    }
    let how = crate::nats_auth::client_connect(g, "lineage-cli")?;
    let url = lineage_bus::redact_url(&how.url);
    check_nats_url(&url)?;
    tokio::time::timeout(Duration::from_secs(5), lineage_bus::connect_with(&how))
        .await
        .map_err(|_| {
            ControlError::new(
                ErrorCode::Unavailable,
                format!(
                "cannot connect to NATS at {url} within 5 s; start nats-server or pass --nats URL"
            ),
            )
        })?
        .map_err(ControlError::from)
}

/// A NATS URL's scheme is one NATS speaks (`nats`, `tls`, `ws`, `wss`; none means `nats`): bad
/// input otherwise (exit 2), before anything is tried.
fn check_nats_url(urls: &str) -> Result<(), ControlError> {
    for url in urls.split(',') {
        if let Some((scheme, _)) = url.trim().split_once("://") {
            if !["nats", "tls", "ws", "wss"].contains(&scheme) {
                return Err(usage(format!(
                    "--nats {url}: {scheme}:// is not a NATS URL; give nats://host:4222 (or tls://, ws://, wss://)"
                )));
            }
        }
    }
    Ok(())
}

/// A session id from a flag or argument; a usage error naming `what` otherwise.
pub fn parse_session(what: &str, raw: &str) -> Result<SessionId, ControlError> {
    SessionId::parse(raw).map_err(|e| usage(format!("{what}: {e}")))
}

/// A registry error as the control error a verb prints (refused, not found, unavailable).
pub fn registry_error(e: RegistryError) -> ControlError {
    let text = e.to_string();
    let code = match &e {
        RegistryError::Refused(_) => ErrorCode::Refused,
        _ if text.contains("not found") => ErrorCode::NotFound,
        _ => ErrorCode::Unavailable,
    };
    ControlError::new(code, text)
}

/// Milliseconds since the Unix epoch (0 before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Prints `value` as pretty JSON (`--json`).
pub fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("error: cannot print JSON: {e}"),
    }
}

/// A [`ControlClient`] of the cluster `--cluster` names, over a new connection, with the
/// `--timeout-ms` deadline per call.
pub async fn control(g: &Global) -> Result<ControlClient, ControlError> {
    let nats = connect(g).await?;
    Ok(ControlClient::new(
        nats,
        subjects(g)?,
        Duration::from_millis(g.timeout_ms),
    ))
}

/// Packs `dir` (honouring `.gitignore`, without `.git`) and stores it as the upload of spawn
/// `request_id` in the cluster's workspace bucket (issue 39): its digest, and the store (the
/// caller removes the upload once the spawn answered: the hosting node copied it).
pub async fn upload_workspace(
    nats: async_nats::Client,
    subjects: &lineage_bus::Subjects,
    dir: &std::path::Path,
    request_id: &lineage_core::ids::RequestId,
) -> Result<(String, lineage_bus::workspace::NatsWorkspaces), ControlError> {
    use lineage_bus::ports::WorkspaceStore;
    let owned = dir.to_path_buf();
    let packed = tokio::task::spawn_blocking(move || {
        lineage_workspace::pack(&owned, lineage_workspace::Caps::default())
    })
    .await
    .map_err(|e| ControlError::new(ErrorCode::Internal, format!("the packer stopped: {e}")))?
    .map_err(|e| usage(e.to_string()))?;
    let store = lineage_bus::workspace::NatsWorkspaces::new(nats, subjects, Default::default());
    let object = lineage_core::workspace::upload_object(request_id);
    let digest = store
        .put(&object, &packed.bytes)
        .await
        .map_err(ControlError::from)?;
    Ok((digest, store))
}

/// Removes the upload of spawn `request_id` (best effort: a line on stderr if it stays).
pub async fn remove_upload(
    store: &lineage_bus::workspace::NatsWorkspaces,
    request_id: &lineage_core::ids::RequestId,
) {
    use lineage_bus::ports::WorkspaceStore;
    let upload = lineage_core::workspace::upload_object(request_id);
    if let Err(e) = store.delete(&[upload]).await {
        tracing::warn!(error = %e, "cannot remove the workspace upload");
    }
}

/// Returns on Ctrl-C or SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
