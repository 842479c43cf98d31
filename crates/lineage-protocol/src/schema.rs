//! The JSON Schemas (draft 2020-12) of every control op's request body and reply envelope
//! (issue 15, O3, N3), generated from the types with `schemars`, so they cannot drift from what
//! a node reads and writes. Each endpoint of the `lineage` micro service carries its two as
//! `request_schema` and `response_schema` metadata (`nats micro info lineage --json`).

use schemars::JsonSchema;

use crate::control::{
    ops, AgentsReply, AgentsRequest, DrainReport, DrainRequest, FollowupReply, FollowupRequest,
    InterruptReply, InterruptRequest, ResumeReply, ResumeRequest, SpawnReply, SpawnRequest,
    StartRequest, StatusReply, StatusRequest, StopReply, StopRequest,
};
use crate::envelope::Reply;

/// The schemas of one op: what its request body is, and what its reply is (the envelope
/// `{"v":1,"result":...}` or `{"v":1,"error":{"code","message"}}`).
#[derive(Debug, Clone, PartialEq)]
pub struct OpSchemas {
    /// The request body's schema.
    pub request: serde_json::Value,
    /// The reply envelope's schema, `result` being the op's reply body.
    pub response: serde_json::Value,
}

/// The schemas of `op` (one of [`ops::NODE`], which holds every op); `None` for an op this
/// build does not serve.
pub fn op_schemas(op: &str) -> Option<OpSchemas> {
    Some(match op {
        ops::SPAWN => of::<SpawnRequest, SpawnReply>(op),
        ops::FOLLOWUP => of::<FollowupRequest, FollowupReply>(op),
        ops::INTERRUPT => of::<InterruptRequest, InterruptReply>(op),
        ops::DRAIN => of::<DrainRequest, DrainReport>(op),
        ops::RESUME => of::<ResumeRequest, ResumeReply>(op),
        ops::STATUS => of::<StatusRequest, StatusReply>(op),
        ops::AGENTS => of::<AgentsRequest, AgentsReply>(op),
        ops::START => of::<StartRequest, SpawnReply>(op),
        ops::STOP | ops::RELEASE => of::<StopRequest, StopReply>(op),
        _ => return None,
    })
}

fn of<Req: JsonSchema, Rep: JsonSchema>(op: &str) -> OpSchemas {
    OpSchemas {
        request: titled(schemars::schema_for!(Req), format!("lineage {op} request")),
        response: titled(
            schemars::schema_for!(Reply<Rep>),
            format!("lineage {op} reply"),
        ),
    }
}

fn titled(schema: schemars::Schema, title: String) -> serde_json::Value {
    let mut value = serde_json::Value::from(schema);
    if let Some(object) = value.as_object_mut() {
        object.insert("title".to_owned(), title.into());
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o3_every_op_has_a_request_and_a_reply_schema() {
        for op in ops::NODE {
            let schemas = op_schemas(op).unwrap_or_else(|| panic!("{op} has no schemas"));
            for (what, schema) in [
                ("request", &schemas.request),
                ("response", &schemas.response),
            ] {
                assert_eq!(
                    schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
                    "{op} {what}"
                );
                assert_eq!(schema["type"], "object", "{op} {what}: {schema}");
            }
            let response = schemas.response.to_string();
            assert!(response.contains("\"result\""), "{op}: {response}");
            assert!(response.contains("\"bad_request\""), "{op}: {response}");
        }
        assert!(op_schemas("bogus").is_none());
        let spawn = op_schemas(ops::SPAWN).unwrap().request.to_string();
        for field in [
            "\"parent\"",
            "\"agent\"",
            "\"prompt\"",
            "\"request_id\"",
            "\"await_children\"",
        ] {
            assert!(spawn.contains(field), "{field} missing from {spawn}");
        }
    }
}
