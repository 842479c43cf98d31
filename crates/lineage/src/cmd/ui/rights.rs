//! Whether the page's credentials may act (issue 36, U1): an observer's credentials give a
//! read-only page without `--read-only`.
//!
//! At start the page asks the NATS server who it is connected as (`$SYS.REQ.USER.INFO`, which
//! answers with the user's permissions when it has any) and whether those permissions let it
//! publish the cluster's drain request (`lineage.<cluster>.ctl.drain`), the action every
//! operator has and no observer has. A user without permissions may act; a user who may not
//! ask (the request is refused or not answered) is not judged here: the page offers the
//! actions and the cluster refuses what the credentials do not allow.

use std::time::Duration;

use serde_json::Value;

/// What the server said of the user's right to act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rights {
    /// It may publish the drain request.
    MayAct,
    /// Its permissions do not let it publish `subject`.
    ReadOnly {
        /// The user, as the server names it.
        user: String,
        /// The subject it may not publish.
        subject: String,
    },
    /// The server did not say (the user may not ask, or the server is older).
    Unknown,
}

/// Asks the server, within `limit`.
pub(crate) async fn ask(nats: &async_nats::Client, cluster: &str, limit: Duration) -> Rights {
    let asked = tokio::time::timeout(limit, nats.request("$SYS.REQ.USER.INFO", "".into())).await;
    match asked {
        Ok(Ok(reply)) => match serde_json::from_slice::<Value>(&reply.payload) {
            Ok(info) => judge(&info, cluster),
            Err(_) => Rights::Unknown,
        },
        _ => Rights::Unknown,
    }
}

/// The rights `info` (the server's reply to `$SYS.REQ.USER.INFO`) gives on `cluster`.
pub(crate) fn judge(info: &Value, cluster: &str) -> Rights {
    let data = &info["data"];
    if data.is_null() || data.get("user").is_none() {
        return Rights::Unknown;
    }
    let subject = format!("lineage.{cluster}.ctl.drain");
    let publish = &data["permissions"]["publish"];
    let list = |key: &str| -> Vec<&str> {
        publish[key]
            .as_array()
            .map(|l| l.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    };
    let (allow, deny) = (list("allow"), list("deny"));
    let allowed = publish["allow"].is_null() || allow.iter().any(|p| matches(p, &subject));
    if allowed && !deny.iter().any(|p| matches(p, &subject)) {
        Rights::MayAct
    } else {
        Rights::ReadOnly {
            user: data["user"].as_str().unwrap_or("?").to_owned(),
            subject,
        }
    }
}

/// NATS subject matching: `*` is one token, `>` the rest (one token or more).
fn matches(pattern: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for p in pattern.split('.') {
        match (p, tokens.next()) {
            (">", Some(_)) => return true,
            (_, None) => return false,
            ("*", Some(_)) => {}
            (p, Some(t)) if p == t => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subjects_match_as_nats_matches_them() {
        for (pattern, subject, want) in [
            ("lineage.dev.ctl.drain", "lineage.dev.ctl.drain", true),
            ("lineage.dev.ctl.*", "lineage.dev.ctl.drain", true),
            ("lineage.dev.>", "lineage.dev.ctl.drain", true),
            (">", "lineage.dev.ctl.drain", true),
            ("lineage.dev.ctl.status", "lineage.dev.ctl.drain", false),
            ("lineage.*.ctl", "lineage.dev.ctl.drain", false),
            ("lineage.dev.ctl.drain.x", "lineage.dev.ctl.drain", false),
            ("lineage.dev.ctl.drain.>", "lineage.dev.ctl.drain", false),
            ("lineage.prod.>", "lineage.dev.ctl.drain", false),
        ] {
            assert_eq!(matches(pattern, subject), want, "{pattern} vs {subject}");
        }
    }

    #[test]
    fn u1_an_observer_reads_only_and_an_operator_acts() {
        let info = |permissions: Value| json!({"data": {"user": "u", "account": "$G", "permissions": permissions}});
        // No permissions at all (an unrestricted user): it acts.
        assert_eq!(
            judge(&json!({"data": {"user": "admin", "account": "$G"}}), "dev"),
            Rights::MayAct
        );
        // The shipped observer: reads, no control.
        let observer = info(json!({"publish": {"allow": [
            "lineage.dev.ctl.status", "lineage.dev.registry.read", "$SYS.REQ.USER.INFO"
        ], "deny": ["lineage.dev.registry.write.read"]}}));
        assert_eq!(
            judge(&observer, "dev"),
            Rights::ReadOnly {
                user: "u".into(),
                subject: "lineage.dev.ctl.drain".into()
            }
        );
        // An operator allowed the control subjects; one denied the drain.
        let operator = info(json!({"publish": {"allow": ["lineage.dev.ctl.*"]}}));
        assert_eq!(judge(&operator, "dev"), Rights::MayAct);
        assert!(matches!(judge(&operator, "prod"), Rights::ReadOnly { .. }));
        let denied = info(json!({"publish": {"deny": ["lineage.*.ctl.drain"]}}));
        assert!(matches!(judge(&denied, "dev"), Rights::ReadOnly { .. }));
        // Subscribe-only permissions leave publishing open.
        let subscribe_only = info(json!({"subscribe": {"allow": ["_INBOX.>"]}}));
        assert_eq!(judge(&subscribe_only, "dev"), Rights::MayAct);
        // A reply that is not the user's info says nothing.
        assert_eq!(judge(&json!({"error": "x"}), "dev"), Rights::Unknown);
    }
}
