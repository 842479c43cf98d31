//! `ListTasks` (A1): the sessions of a context (its root's tree), or without one the
//! top-level sessions of the agent's profile, oldest first, a page at a time from the registry's listing (the page
//! token is its cursor, `<created_at_ms>.<id>`); `status` filters on the task state.

use a2a::{A2AError, ListTasksRequest, ListTasksResponse};
use lineage_registry::listing::ListCursor;
use lineage_registry::Consistency;

use super::handler::{filter_of, Cluster};

/// The most tasks one page holds (and the size when the request gives none).
const MAX_PAGE: i32 = 100;
/// How many registry pages one `ListTasks` reads at most to fill its page.
const MAX_READS: usize = 20;

/// One page of tasks.
pub(crate) async fn list(
    cluster: &Cluster,
    profile: &str,
    req: ListTasksRequest,
) -> Result<ListTasksResponse, A2AError> {
    let size = match req.page_size {
        None => MAX_PAGE,
        Some(n) if (1..=MAX_PAGE).contains(&n) => n,
        Some(n) => {
            return Err(A2AError::invalid_params(format!(
                "pageSize {n} is out of range; give 1 to {MAX_PAGE}"
            )))
        }
    };
    let mut after = match req.page_token.as_deref() {
        None | Some("") => None,
        Some(token) => Some(token.parse::<ListCursor>().map_err(|e| {
            A2AError::invalid_params(format!(
                "pageToken {token:?} is not one this server gave ({e}); leave it out for the first page"
            ))
        })?),
    };
    let filter = filter_of(&req)?;
    let top_level_only = req.context_id.is_none();
    let mut tasks = Vec::new();
    let mut next = None;
    for _ in 0..MAX_READS {
        let (records, cursor) = cluster
            .registry
            .list_page(
                filter.clone(),
                after.clone(),
                size as u32,
                Consistency::Linearizable,
            )
            .await
            .map_err(|e| A2AError::internal(format!("reading the registry: {e}")))?;
        for record in records {
            if top_level_only && record.header.parent_session().is_some() {
                continue;
            }
            let read = cluster.read(record.header.id().as_str()).await?;
            if top_level_only && read.log.profile.as_deref() != Some(profile) {
                continue;
            }
            let mut task = cluster.task_of(&read, req.history_length).await;
            if req.status.as_ref().is_some_and(|s| *s != task.status.state) {
                continue;
            }
            if !req.include_artifacts.unwrap_or(false) {
                task.artifacts = None;
            }
            tasks.push(task);
        }
        next = cursor;
        match &next {
            Some(cursor) if tasks.len() < size as usize => after = Some(cursor.clone()),
            _ => break,
        }
    }
    let total = tasks.len() as i32;
    Ok(ListTasksResponse {
        tasks,
        next_page_token: next.map(|c| c.to_string()).unwrap_or_default(),
        page_size: size,
        total_size: total,
    })
}
