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
    let script = serde_json::from_value(value.clone()).map_err(|e| {
        usage(format!(
            "invalid script: {e}; example: {{\"turns\":[[{{\"do\":\"reply\",\"content\":\"hi\"}}]]}} (all steps: lineage script schema, docs/script.md)"
        ))
    })?;
    for line in deprecations(&value) {
        eprintln!("warning: {line}");
    }
    Ok(script)
}
