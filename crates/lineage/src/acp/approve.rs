//! A root agent's permission requests, asked of the editor (C4): the node that hosts a root
//! opened here sends its agent's `session/request_permission` as an
//! [`ApprovalRequest`](lineage_protocol::approval::ApprovalRequest) on the root's approval
//! subject; this front door, when the root is one of its sessions, asks the editor with ACP
//! `session/request_permission` and answers the option the person picked. No answer within
//! the request's deadline, a dismissal or a broken editor is a refusal (`option: null`). A
//! request for a session that is not open here is left to the front door that holds it.

use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use futures::StreamExt;
use lineage_protocol::approval::{
    ApprovalOption, ApprovalReply, ApprovalRequest, APPROVAL_VERSION,
};

use super::{lock, Front};

/// Subscribes the approval subjects and answers those of this connection's roots, until the
/// returned task is aborted.
pub(crate) async fn serve(front: Arc<Front>) -> Result<tokio::task::JoinHandle<()>, String> {
    let subject = front.subjects.all_session_approvals();
    let mut requests = front.nats.subscribe(subject.clone()).await.map_err(|e| {
        format!("cannot subscribe {subject}: {e}; check the NATS user's permissions")
    })?;
    Ok(tokio::spawn(async move {
        while let Some(message) = requests.next().await {
            let Some(reply_to) = message.reply.clone() else {
                continue;
            };
            let request = match ApprovalRequest::decode(&message.payload) {
                Ok(request) => request,
                Err(e) => {
                    tracing::warn!(subject = %message.subject, error = %e, "ignored an approval request");
                    continue;
                }
            };
            if !lock(&front.tree).is_root(&request.session) {
                continue;
            }
            let front = front.clone();
            tokio::spawn(async move {
                let option = ask_editor(&front, &request).await;
                tracing::info!(session = %request.session, title = %request.title, ?option, "approval answered");
                let reply = ApprovalReply {
                    v: APPROVAL_VERSION,
                    option,
                };
                if let Ok(body) = serde_json::to_vec(&reply) {
                    if let Err(e) = front.nats.publish(reply_to, body.into()).await {
                        tracing::warn!(error = %e, "cannot answer an approval request");
                    }
                }
            });
        }
    }))
}

/// Asks the editor; the option id picked, or `None` (refused, dismissed, no editor, no answer
/// within the request's deadline).
async fn ask_editor(front: &Front, request: &ApprovalRequest) -> Option<String> {
    let client = front.client.get()?;
    let fields = ToolCallUpdateFields::new()
        .title(request.title.clone())
        .kind(tool_kind(request.tool_kind.as_deref()));
    let options: Vec<PermissionOption> = request.options.iter().map(option).collect();
    let ask = RequestPermissionRequest::new(
        request.session.to_string(),
        ToolCallUpdate::new(format!("approval-{}", uuid::Uuid::now_v7()), fields),
        options,
    );
    // A little under the node's deadline, so the node hears the answer (or the refusal).
    let within = Duration::from_millis(request.timeout_ms.saturating_sub(1000).max(1000));
    match tokio::time::timeout(within, client.send_request(ask).block_task()).await {
        Ok(Ok(response)) => match response.outcome {
            RequestPermissionOutcome::Selected(selected) => {
                let id = selected.option_id.to_string();
                request.options.iter().any(|o| o.id == id).then_some(id)
            }
            RequestPermissionOutcome::Cancelled => None,
            _ => None,
        },
        Ok(Err(e)) => {
            tracing::info!(error = %e, "the editor did not answer a permission request: refused");
            None
        }
        Err(_) => {
            tracing::info!(session = %request.session, "no answer from the editor in time: refused");
            None
        }
    }
}

/// An option as ACP spells it (an unknown kind reads as a one-time refusal: never an allow).
fn option(o: &ApprovalOption) -> PermissionOption {
    let kind = match o.kind.as_str() {
        "allow_once" => PermissionOptionKind::AllowOnce,
        "allow_always" => PermissionOptionKind::AllowAlways,
        "reject_always" => PermissionOptionKind::RejectAlways,
        _ => PermissionOptionKind::RejectOnce,
    };
    PermissionOption::new(o.id.clone(), o.name.clone(), kind)
}

/// A tool kind as ACP spells it (`other` for anything unknown).
fn tool_kind(kind: Option<&str>) -> ToolKind {
    kind.and_then(|k| serde_json::from_value(serde_json::Value::String(k.to_owned())).ok())
        .unwrap_or(ToolKind::Other)
}
