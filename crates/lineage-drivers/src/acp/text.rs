//! Text the ACP driver writes: prompt text from turn messages, the log replayed as context on a
//! fresh session, and one-line error messages (nothing an agent sends spans lines in an error).

use lineage_core::log::SessionEvent;
use lineage_core::workspace::changes_sentence;
use serde_json::Value;

use super::ACP_SESSION_EVENT;
use crate::driver::TurnMessage;
use crate::error::DriverError;

/// Longest piece of agent-provided text put into an error message.
pub(super) const MAX_DETAIL: usize = 300;

/// The one-line driver error about the agent `program` hosting `session`.
pub(super) fn agent_error(session: &str, program: &str, what: &str) -> DriverError {
    DriverError::Agent {
        session: session.to_owned(),
        reason: format!(
            "ACP agent `{program}`: {}; check the agent command",
            one_line(what)
        ),
    }
}

/// The agent's session id recorded in the log (the last [`ACP_SESSION_EVENT`]).
pub(super) fn recorded_session(log: &[SessionEvent]) -> Option<String> {
    log.iter()
        .rev()
        .filter(|event| event.kind == ACP_SESSION_EVENT)
        .find_map(|event| match &event.data {
            Value::String(id) => Some(id.clone()),
            Value::Object(map) => map
                .get("acp_session_id")
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        })
        .filter(|id| !id.is_empty())
}

/// The log's user and assistant turns as context for a fresh agent session; `None` when there
/// are none.
pub(super) fn render_history(log: &[SessionEvent]) -> Option<String> {
    let turns: Vec<String> = log
        .iter()
        .filter_map(|event| {
            let who = match event.kind.as_str() {
                "turn/user" => "User",
                "turn/assistant" => "Assistant",
                _ => return None,
            };
            Some(format!("{who}: {}", event_text(&event.data)))
        })
        .collect();
    if turns.is_empty() {
        return None;
    }
    Some(format!(
        "[lineage] This conversation is resumed on a fresh agent session. The earlier turns \
         follow for context.\n{}\n[lineage] End of the earlier turns; the new message follows.",
        turns.join("\n")
    ))
}

/// The text of a turn event's data: `text`, `content` or `messages`, else the JSON itself.
fn event_text(data: &Value) -> String {
    match data {
        Value::String(text) => text.clone(),
        Value::Object(map) => {
            for key in ["text", "content", "reply"] {
                if let Some(text) = map.get(key).and_then(Value::as_str) {
                    return text.to_string();
                }
            }
            if let Some(messages) = map.get("messages").and_then(Value::as_array) {
                return messages
                    .iter()
                    .map(event_text)
                    .collect::<Vec<_>>()
                    .join("\n");
            }
            if let Some(summary) = map.get("summary").and_then(Value::as_str) {
                return summary.to_string();
            }
            data.to_string()
        }
        other => other.to_string(),
    }
}

/// A turn message as prompt text.
pub(crate) fn render_message(message: &TurnMessage) -> String {
    match message {
        TurnMessage::User { content } => content.clone(),
        TurnMessage::SubagentReport {
            sender_session_id,
            content,
        } => format!(
            "[report from subagent {}]\n{content}",
            sender_session_id.as_str()
        ),
        TurnMessage::SubagentSettled {
            sender_session_id,
            summary,
            changed,
        } => {
            let text = format!(
                "[subagent {} settled] {summary}",
                sender_session_id.as_str()
            );
            match changed.and_then(|n| changes_sentence(sender_session_id, n)) {
                Some(sentence) => format!("{text}\n{sentence}"),
                None => text,
            }
        }
    }
}

/// An SDK error on one line: its message and compact data.
pub(super) fn sdk_error(e: &agent_client_protocol::Error) -> String {
    if agent_client_protocol::is_incoming_transport_closed(e) {
        return "the agent closed its output".into();
    }
    if agent_client_protocol::is_connection_terminated(e) {
        return "the connection to the agent ended".into();
    }
    match &e.data {
        None => e.message.clone(),
        Some(Value::String(data)) => format!("{}: {data}", e.message),
        Some(data) => format!("{}: {data}", e.message),
    }
}

/// `text` on one line: control characters become spaces, runs of spaces collapse, and the
/// result is cut at [`MAX_DETAIL`] characters.
pub(super) fn one_line(text: &str) -> String {
    let flat = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>();
    let mut out = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.chars().count() > MAX_DETAIL {
        out = out.chars().take(MAX_DETAIL).collect::<String>() + "…";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, kind: &str, data: Value) -> SessionEvent {
        SessionEvent {
            seq,
            kind: kind.into(),
            data,
            at_ms: seq,
        }
    }

    #[test]
    fn history_renders_user_and_assistant_turns_only() {
        let log = vec![
            event(1, "subagent/descriptor", json!({})),
            event(2, "turn/user", json!({"text": "hi"})),
            event(3, "turn/assistant", json!({"text": "hello"})),
        ];
        let text = render_history(&log).unwrap();
        assert!(text.contains("User: hi\nAssistant: hello"), "{text}");
        assert_eq!(render_history(&log[..1]), None);
    }

    #[test]
    fn recorded_session_takes_the_last_record() {
        let log = vec![
            event(1, ACP_SESSION_EVENT, json!({"acp_session_id": "a"})),
            event(2, ACP_SESSION_EVENT, json!({"acp_session_id": "b"})),
            event(3, ACP_SESSION_EVENT, json!(42)),
        ];
        assert_eq!(recorded_session(&log).as_deref(), Some("b"));
        assert_eq!(recorded_session(&[]), None);
    }

    #[test]
    fn one_line_flattens_and_truncates() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        assert_eq!(one_line(&"x".repeat(1000)).chars().count(), MAX_DETAIL + 1);
    }

    #[test]
    fn agent_errors_name_the_program_and_what_to_check_on_one_line() {
        let err = agent_error("s-1", "/bin/agent", "it broke\nbadly").to_string();
        assert_eq!(
            err,
            "agent s-1 failed: ACP agent `/bin/agent`: it broke badly; check the agent command"
        );
    }
}
