//! Issue 15 (O3, N3): every endpoint of the `lineage` micro service carries the JSON Schemas of
//! its request body and reply envelope as `request_schema` / `response_schema` metadata, and
//! they describe what a real node reads and answers. Checked with a validator this project did
//! not write (Python `jsonschema`, Draft 2020-12, installed by `scripts/install-deps.sh`)
//! against a real nats-server and a real node: the bodies `docs/nats.md` sends validate, a
//! malformed one does not, and the node's own replies (a result and an error) validate.

use std::process::Command;

use lineage_testkit::prelude::Cluster;
use serde_json::{json, Value};

/// Whether `instance` matches `schema` (itself checked as a Draft 2020-12 schema), by Python's
/// `jsonschema`; the first error's message when it does not.
fn validate(schema: &Value, instance: &Value) -> Result<(), String> {
    let program = "import json, sys, jsonschema\n\
        schema = json.load(open(sys.argv[1]))\n\
        jsonschema.Draft202012Validator.check_schema(schema)\n\
        errors = list(jsonschema.Draft202012Validator(schema).iter_errors(json.load(open(sys.argv[2]))))\n\
        print('valid' if not errors else 'invalid: ' + errors[0].message)\n";
    let dir = tempfile::tempdir().unwrap();
    let (s, i) = (
        dir.path().join("schema.json"),
        dir.path().join("instance.json"),
    );
    std::fs::write(&s, schema.to_string()).unwrap();
    std::fs::write(&i, instance.to_string()).unwrap();
    let out = Command::new("python3")
        .args(["-c", program, s.to_str().unwrap(), i.to_str().unwrap()])
        .output()
        .expect("python3 with jsonschema (scripts/install-deps.sh)");
    assert!(
        out.status.success(),
        "jsonschema failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    match String::from_utf8_lossy(&out.stdout).trim() {
        "valid" => Ok(()),
        other => Err(other.to_owned()),
    }
}

#[test]
fn o3_endpoint_metadata_schemas_describe_what_a_node_reads_and_answers() {
    let c = Cluster::start(1);
    let info = c.request("$SRV.INFO.lineage", b"");
    let endpoints = info["endpoints"].as_array().expect("endpoints").clone();
    assert!(endpoints.len() >= 17, "{info}");
    let schema_of = |subject: &str, key: &str| -> Value {
        let endpoint = endpoints
            .iter()
            .find(|e| e["subject"] == subject)
            .unwrap_or_else(|| panic!("no endpoint on {subject}: {endpoints:?}"));
        let text = endpoint["metadata"][key]
            .as_str()
            .unwrap_or_else(|| panic!("{subject} has no {key}: {endpoint}"));
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{subject} {key}: {e}"))
    };
    for endpoint in &endpoints {
        let subject = endpoint["subject"].as_str().unwrap();
        for key in ["request_schema", "response_schema"] {
            let schema = schema_of(subject, key);
            assert_eq!(
                schema["$schema"],
                "https://json-schema.org/draft/2020-12/schema"
            );
        }
        assert!(
            endpoint["metadata"]["description"].is_string(),
            "{endpoint}"
        );
    }

    let spawn = &format!("lineage.{}.ctl.spawn", c.cluster);
    let (request, response) = (
        schema_of(spawn, "request_schema"),
        schema_of(spawn, "response_schema"),
    );
    // `docs/nats.md`'s `nats req lineage.dev.ctl.spawn` body, as a top-level session.
    let body = json!({"shape": "continuable", "node": "node-1", "prompt": "work",
        "agent": {"driver": "script", "script": {"turns": [[
            {"do": "report", "content": "half way", "delivery": "quiet"},
            {"do": "reply", "content": "child done"}]], "after": {"do": "echo"}}}});
    validate(&request, &body).expect("docs/nats.md's spawn body");
    for bad in [
        json!({"prompt": "no agent"}),
        json!({"agent": {"driver": "script", "script": {"turns": [[{"do": "dance"}]]}}}),
        json!({"agent": {"driver": "profile", "profile": "x"}, "parent": "not.an.id"}),
        json!({"agent": {"driver": "profile", "profile": "x"}, "bogus": 1}),
    ] {
        assert!(validate(&request, &bad).is_err(), "{bad} matched");
    }
    let reply = c.ctl("spawn", body.to_string().as_bytes());
    assert!(reply["result"]["session"].is_string(), "{reply}");
    validate(&response, &reply).expect("the node's spawn reply");
    let refused = c.ctl("spawn", br#"{"prompt":"no agent"}"#);
    assert_eq!(refused["error"]["code"], "bad_request", "{refused}");
    validate(&response, &refused).expect("the node's error reply");
    assert!(validate(&response, &json!({"v": 1, "result": {"session": 5}})).is_err());

    let status = &format!("lineage.{}.ctl.status", c.cluster);
    validate(&schema_of(status, "request_schema"), &json!({})).expect("status {}");
    let reply = c.ctl("status", b"{}");
    validate(&schema_of(status, "response_schema"), &reply).expect("the node's status reply");
}
