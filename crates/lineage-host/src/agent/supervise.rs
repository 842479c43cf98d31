//! An agent task under supervision: a panic in it (a bug) is caught, logged with the session
//! and its message, and the session leaves this node's table (found when a counter panic in Q2
//! hid behind a handle that looked live).

use std::sync::Arc;

use lineage_core::ids::SessionId;

use crate::shared::Shared;

/// Runs an agent task's loop; a panic in it (a bug) is logged as an error with the session, and
/// the session leaves this node's table, instead of ending the task silently with a handle that
/// still looks live. Its registry record stays as it was (a later followup or resume finds it
/// not live here).
pub(super) async fn supervised(
    shared: Arc<Shared>,
    session: SessionId,
    run: impl std::future::Future<Output = ()>,
) {
    if let Err(what) = caught(run).await {
        tracing::error!(%session, panic = %what, "agent task panicked (a bug); the session is no longer live here");
        shared.live.remove(&session);
    }
}

/// Runs `run` to its end; a panic in it comes back as its message.
async fn caught(run: impl std::future::Future<Output = ()>) -> Result<(), String> {
    use futures::FutureExt;
    std::panic::AssertUnwindSafe(run)
        .catch_unwind()
        .await
        .map_err(|panic| {
            panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned())
        })
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_panic_in_an_agent_task_comes_back_as_its_message() {
        assert_eq!(super::caught(async {}).await, Ok(()));
        let index = std::hint::black_box(5usize);
        let got = super::caught(async move {
            let counters = [0u64; 5];
            let _ = counters[index];
        })
        .await;
        let message = got.expect_err("the panic is caught");
        assert!(message.contains("index out of bounds"), "{message}");
        let got = super::caught(async { panic!("boom {}", 7) }).await;
        assert_eq!(got, Err("boom 7".to_owned()));
    }
}
