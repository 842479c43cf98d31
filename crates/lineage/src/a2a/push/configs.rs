//! The four push config operations of an agent: create (which fixes the state it starts
//! from), get, list and delete, over the bucket. A config belongs to a task of this agent;
//! a bad URL, id or credential is one line and writes nothing.

use a2a::{A2AError, TaskPushNotificationConfig};

use super::mark_now;
use super::store::{check_config_id, PushEntry, MAX_CONFIGS_PER_TASK};
use crate::a2a::handler::{state_name, Agent, Read};

/// Whether `host` names this machine or a private network (the sender's guard refuses these
/// at send time too; here a client hears it at once).
fn private_host(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => {
            let d = d.to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost") || d.ends_with(".internal")
        }
        url::Host::Ipv4(ip) => {
            ip.is_loopback()
                || ip.is_private()
                || ip.is_link_local()
                || ip.is_unspecified()
                || ip.is_broadcast()
        }
        url::Host::Ipv6(ip) => {
            ip.is_loopback() || ip.is_unspecified() || (ip.segments()[0] & 0xfe00) == 0xfc00
        }
    }
}

/// The config's URL and credentials, checked; one line for the first thing wrong.
pub(crate) fn check_config(
    config: &TaskPushNotificationConfig,
    allow_private: bool,
) -> Result<(), A2AError> {
    let url = reqwest::Url::parse(&config.url).map_err(|e| {
        A2AError::invalid_params(format!(
            "push url {:?} is not a URL ({e}); give the webhook's http:// address",
            config.url
        ))
    })?;
    match url.scheme() {
        "http" => {}
        "https" => {
            return Err(A2AError::invalid_params(format!(
                "push url {:?} is https, and this gateway sends webhooks over http:// only (it has no TLS client); give an http:// address, e.g. of a TLS proxy",
                config.url
            )))
        }
        _ => {
            return Err(A2AError::invalid_params(format!(
                "push url {:?} is not http://; give the webhook's http:// address",
                config.url
            )))
        }
    }
    match url.host() {
        None => {
            return Err(A2AError::invalid_params(format!(
                "push url {:?} names no host",
                config.url
            )))
        }
        Some(host) if !allow_private && private_host(&host) => {
            return Err(A2AError::invalid_params(format!(
                "push url {:?} is on this machine or a private network, which this gateway does not call (its operator can allow it with --push-allow-private)",
                config.url
            )))
        }
        Some(_) => {}
    }
    let credentials = config
        .authentication
        .as_ref()
        .and_then(|a| a.credentials.as_deref());
    for (what, value) in [
        ("token", config.token.as_deref()),
        ("credentials", credentials),
    ] {
        if value.is_some_and(|v| v.contains(['\r', '\n'])) {
            return Err(A2AError::invalid_params(format!(
                "push {what} must be one line (no CR or LF)"
            )));
        }
    }
    if let Some(auth) = &config.authentication {
        if !matches!(
            auth.scheme.to_ascii_lowercase().as_str(),
            "bearer" | "basic"
        ) {
            return Err(A2AError::invalid_params(format!(
                "push authentication scheme {:?} is not Bearer or Basic",
                auth.scheme
            )));
        }
    }
    Ok(())
}

impl Agent {
    /// A task of this agent, read; one line for another agent's, or a child.
    async fn own_task(&self, task: &str) -> Result<Read, A2AError> {
        let read = self.cluster.read(task).await?;
        if read.log.profile.as_deref() != Some(self.profile.as_str()) {
            return Err(A2AError::task_not_found(task));
        }
        Ok(read)
    }

    /// `CreateTaskPushNotificationConfig`: stores the config, starting from the task's state
    /// now (which is not sent).
    pub(crate) async fn create_push(
        &self,
        mut config: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        check_config(&config, self.cluster.push_allow_private)?;
        let id = match config.id.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => {
                check_config_id(id)?;
                id.to_owned()
            }
            None => uuid::Uuid::new_v4().simple().to_string(),
        };
        let read = self.own_task(config.task_id.as_str()).await?;
        let state = read.state();
        if state.is_terminal() {
            return Err(A2AError::unsupported_operation(format!(
                "task {} is {}; nothing more will happen to it, so nothing would be pushed",
                config.task_id,
                state_name(&state)
            )));
        }
        let task = read.record.header.id().to_string();
        let store = &self.cluster.push;
        let existing = store.list(&task).await?;
        let replaces = existing.iter().any(|e| e.config.id.as_deref() == Some(&id));
        if !replaces && existing.len() >= MAX_CONFIGS_PER_TASK {
            return Err(A2AError::invalid_params(format!(
                "task {task} has {MAX_CONFIGS_PER_TASK} push configs already; delete one first"
            )));
        }
        let (events, _) = self
            .cluster
            .logs
            .read(read.record.header.id())
            .await
            .map_err(|e| A2AError::internal(format!("reading the task's log: {e}")))?;
        config.id = Some(id);
        config.task_id = task.as_str().into();
        let entry = PushEntry {
            config: config.clone(),
            delivered: mark_now(&events, read.record.state, read.record.stop_reason),
            claim: None,
        };
        store.put(&entry).await?;
        Ok(config)
    }

    /// `GetTaskPushNotificationConfig`.
    pub(crate) async fn get_push(
        &self,
        task: &str,
        id: &str,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        check_config_id(id)?;
        self.own_task(task).await?;
        match self.cluster.push.entry(task, id).await? {
            Some((entry, _)) => Ok(entry.config),
            None => Err(A2AError::invalid_params(format!(
                "task {task} has no push config {id:?}; ListTaskPushNotificationConfigs lists them"
            ))),
        }
    }

    /// `ListTaskPushNotificationConfigs`.
    pub(crate) async fn list_push(
        &self,
        task: &str,
    ) -> Result<Vec<TaskPushNotificationConfig>, A2AError> {
        self.own_task(task).await?;
        let mut configs: Vec<_> = self
            .cluster
            .push
            .list(task)
            .await?
            .into_iter()
            .map(|e| e.config)
            .collect();
        configs.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(configs)
    }

    /// `DeleteTaskPushNotificationConfig` (deleting one that is gone is not an error).
    pub(crate) async fn delete_push(&self, task: &str, id: &str) -> Result<(), A2AError> {
        check_config_id(id)?;
        self.own_task(task).await?;
        self.cluster.push.delete(task, id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> TaskPushNotificationConfig {
        TaskPushNotificationConfig {
            url: url.to_owned(),
            id: None,
            task_id: "t".into(),
            token: None,
            authentication: None,
            tenant: None,
        }
    }

    #[test]
    fn a1_a_push_url_must_be_http_and_public_unless_the_operator_allows_private() {
        assert!(check_config(&config("http://hooks.example.com/x"), false).is_ok());
        for bad in [
            "https://hooks.example.com/x",
            "ftp://hooks.example.com/",
            "not a url",
            "http://127.0.0.1:9/",
            "http://localhost/",
            "http://10.1.2.3/",
            "http://169.254.169.254/latest",
            "http://[::1]/",
        ] {
            let e = check_config(&config(bad), false).unwrap_err();
            assert!(!e.message.contains('\n'), "{bad}: {}", e.message);
        }
        assert!(check_config(&config("http://127.0.0.1:9/"), true).is_ok());
        let mut token = config("http://hooks.example.com/");
        token.token = Some("a\r\nX-Evil: 1".into());
        assert!(check_config(&token, false).is_err());
        assert!(check_config_id("ok_id-1").is_ok());
        assert!(check_config_id("a.b").is_err() && check_config_id("").is_err());
    }
}
