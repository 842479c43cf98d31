//! The push notification configs of the A2A gateways, in a NATS Key-Value bucket
//! (`LINEAGE_<CLUSTER>_A2A_PUSH`), with what each config has been sent: every gateway reads and
//! writes the same entries, so any gateway answers `GetTaskPushNotificationConfig` and any one
//! delivers (and a dead one's deliveries are taken over).
//!
//! A key is `<task>.<config id>`; its value a [`PushEntry`]. Writes after the first go by
//! revision (compare and set): a claim to deliver a transition and the record that it was
//! delivered are each one `update` that fails if another gateway wrote first.

use a2a::{A2AError, TaskPushNotificationConfig};
use async_nats::jetstream::kv;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

/// The most configs one task may have (each one is a POST per state change).
pub const MAX_CONFIGS_PER_TASK: usize = 16;

/// A task's state as delivered (or to deliver): the log position it was read at and the
/// state's wire name (`TASK_STATE_WORKING`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// The last log seq read for it (0: none yet).
    pub seq: u64,
    /// The state's wire name.
    pub state: String,
}

/// One config and its delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushEntry {
    /// The config as the client gave it (its id filled in).
    pub config: TaskPushNotificationConfig,
    /// The last transition delivered (at creation: the state the task was in then, which is
    /// not sent).
    pub delivered: Mark,
    /// A transition a gateway is delivering now, and until when (ms since the epoch) the
    /// claim holds; after that another gateway may take it over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<(Mark, u64)>,
}

/// The bucket.
#[derive(Clone)]
pub struct PushStore {
    kv: kv::Store,
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> A2AError {
    A2AError::internal(format!("push configs: {what}: {e}"))
}

/// A config id: 1 to 64 of `A-Z a-z 0-9 _ -` (it is part of a key).
pub fn check_config_id(id: &str) -> Result<(), A2AError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match ok {
        true => Ok(()),
        false => Err(A2AError::invalid_params(format!(
            "push config id {id:?} must be 1 to 64 letters, digits, '_' or '-'; omit it to get one"
        ))),
    }
}

fn key(task: &str, id: &str) -> String {
    format!("{task}.{id}")
}

impl PushStore {
    /// Opens the bucket, creating it when missing.
    pub async fn open(
        nats: async_nats::Client,
        bucket: String,
        replicas: usize,
    ) -> Result<PushStore, A2AError> {
        let js = async_nats::jetstream::new(nats);
        let kv = match js.get_key_value(&bucket).await {
            Ok(kv) => kv,
            Err(_) => js
                .create_key_value(kv::Config {
                    bucket: bucket.clone(),
                    description: "lineage A2A push notification configs".to_owned(),
                    history: 1,
                    num_replicas: replicas,
                    storage: async_nats::jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| unavailable(&format!("creating bucket {bucket}"), e))?,
        };
        Ok(PushStore { kv })
    }

    /// The entry of `task`'s config `id`, with its revision.
    pub async fn entry(&self, task: &str, id: &str) -> Result<Option<(PushEntry, u64)>, A2AError> {
        let entry = self
            .kv
            .entry(key(task, id))
            .await
            .map_err(|e| unavailable("reading", e))?;
        Ok(entry.and_then(|e| match e.operation {
            kv::Operation::Put => serde_json::from_slice(&e.value)
                .ok()
                .map(|v| (v, e.revision)),
            kv::Operation::Delete | kv::Operation::Purge => None,
        }))
    }

    /// Every key, as (task, config id).
    pub async fn keys(&self) -> Result<Vec<(String, String)>, A2AError> {
        let keys: Vec<String> = self
            .kv
            .keys()
            .await
            .map_err(|e| unavailable("listing", e))?
            .try_collect()
            .await
            .map_err(|e| unavailable("listing", e))?;
        Ok(keys
            .into_iter()
            .filter_map(|k| k.split_once('.').map(|(t, i)| (t.to_owned(), i.to_owned())))
            .collect())
    }

    /// `task`'s configs.
    pub async fn list(&self, task: &str) -> Result<Vec<PushEntry>, A2AError> {
        let mut out = Vec::new();
        for (t, id) in self.keys().await? {
            if t == task {
                if let Some((entry, _)) = self.entry(&t, &id).await? {
                    out.push(entry);
                }
            }
        }
        Ok(out)
    }

    /// Writes a new entry (or replaces a config with the same id, keeping nothing of its
    /// deliveries).
    pub async fn put(&self, entry: &PushEntry) -> Result<(), A2AError> {
        let id = entry.config.id.as_deref().unwrap_or_default();
        let value = serde_json::to_vec(entry).map_err(|e| unavailable("encoding", e))?;
        self.kv
            .put(key(&entry.config.task_id, id), value.into())
            .await
            .map_err(|e| unavailable("writing", e))?;
        Ok(())
    }

    /// Replaces the entry at `revision`, giving its new revision; `None` when another gateway
    /// wrote it first (or it was deleted).
    pub async fn update(&self, entry: &PushEntry, revision: u64) -> Result<Option<u64>, A2AError> {
        let id = entry.config.id.as_deref().unwrap_or_default();
        let value = serde_json::to_vec(entry).map_err(|e| unavailable("encoding", e))?;
        match self
            .kv
            .update(key(&entry.config.task_id, id), value.into(), revision)
            .await
        {
            Ok(new) => Ok(Some(new)),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(unavailable("updating", e)),
        }
    }

    /// Deletes `task`'s config `id` (deleting one that is gone is not an error).
    pub async fn delete(&self, task: &str, id: &str) -> Result<(), A2AError> {
        self.kv
            .purge(key(task, id))
            .await
            .map_err(|e| unavailable("deleting", e))
    }
}
