//! `lineage script schema` and `lineage script check` (issue 15, O1): the scripted agent's
//! language in one place. `schema` prints its JSON Schema (`lineage_protocol::script::schema`);
//! `check` reads a script as `spawn --script` does and says whether it is valid, warning about
//! deprecated spellings. [`read_script`] is the one reader every verb uses.

use lineage_bus::control::ControlError;
use lineage_protocol::script::{deprecations, schema};
use lineage_protocol::Script;

use crate::client::print_json;
use crate::output::usage;

/// The `script` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ScriptVerb {
    /// Print the JSON Schema of a script (draft 2020-12), for editors and validators.
    #[command(after_help = "Example:\n  lineage script schema > script.schema.json")]
    Schema,
    /// Check a script (JSON, or @file.json / @file.toml) without running it.
    #[command(
        after_help = "Example:\n  lineage script check '{\"turns\":[[{\"do\":\"reply\",\"content\":\"hi\"}]]}'\n  lineage script check @child.toml"
    )]
    Check {
        /// The script, or @path to a .json or .toml file.
        script: String,
    },
}

/// Runs a `script` subcommand.
pub(crate) fn run(verb: ScriptVerb) -> Result<(), ControlError> {
    match verb {
        ScriptVerb::Schema => {
            print_json(&schema());
            Ok(())
        }
        ScriptVerb::Check { script } => {
            let parsed = read_script(&script)?;
            let steps: usize = parsed.turns.iter().map(Vec::len).sum();
            println!("script ok: {} turn(s), {steps} step(s)", parsed.turns.len());
            Ok(())
        }
    }
}

/// Where a script's error is: `path` (serde's, e.g. `turns[0][1]`), and, when that is a step
/// and the error shows the bad value (`invalid type: string "x"`), the field holding it
/// (`turns[0][1].ms`): a step's fields are read as a whole by its `do` tag, so serde's path
/// stops at the step.
fn bad_field(value: &serde_json::Value, path: &str, message: &str) -> String {
    let path = if path.is_empty() || path == "." {
        "the top"
    } else {
        path
    };
    let Some(shown) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|rest| rest.split_once(", expected"))
        .map(|(shown, _)| shown)
    else {
        return path.to_owned();
    };
    // The step the path names: `turns[i][j]` (or `after`).
    let mut at = value;
    for token in path.split(['.', '[', ']']).filter(|t| !t.is_empty()) {
        at = match token.parse::<usize>() {
            Ok(i) => &at[i],
            Err(_) => &at[token],
        };
    }
    let Some(step) = at.as_object() else {
        return path.to_owned();
    };
    let fields: Vec<&String> = step
        .iter()
        .filter(|(_, v)| match v {
            serde_json::Value::String(s) => shown == format!("string {s:?}"),
            serde_json::Value::Bool(b) => shown == format!("boolean `{b}`"),
            serde_json::Value::Number(n) if n.is_f64() => shown == format!("floating point `{n}`"),
            serde_json::Value::Number(n) => shown == format!("integer `{n}`"),
            serde_json::Value::Null => shown == "null",
            serde_json::Value::Array(_) => shown == "sequence",
            serde_json::Value::Object(_) => shown == "map",
        })
        .map(|(k, _)| k)
        .collect();
    match fields.as_slice() {
        [one] => format!("{path}.{one}"),
        _ => path.to_owned(),
    }
}

/// Reads a script given on the command line: JSON text, or `@path` to a `.json` or `.toml`
/// file. A malformed one is a usage error (exit 2) in one line; each deprecated spelling it
/// uses is a `warning:` line on stderr (the script still runs).
pub(crate) fn read_script(raw: &str) -> Result<Script, ControlError> {
    let (text, toml) = match raw.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read script file {path}: {e}")))?,
            path.ends_with(".toml"),
        ),
        None => (raw.to_owned(), false),
    };
    let value: serde_json::Value = if toml {
        figment::Figment::from(
            <figment::providers::Toml as figment::providers::Format>::string(&text),
        )
        .extract()
        .map_err(|e| usage(format!("invalid script TOML: {e}")))?
    } else {
        serde_json::from_str(&text).map_err(|e| usage(format!("invalid script JSON: {e}")))?
    };
    let script = serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        let at = bad_field(&value, &e.path().to_string(), &e.inner().to_string());
        usage(format!(
            "invalid script at {at}: {}; example: {{\"turns\":[[{{\"do\":\"reply\",\"content\":\"hi\"}}]]}} (all steps: lineage script schema, docs/script.md)",
            lineage_node::config::plain_expectation(&e.inner().to_string())
        ))
    })?;
    for line in deprecations(&value) {
        eprintln!("warning: {line}");
    }
    Ok(script)
}
