//! Config errors in the operator's words (issue 37): the environment variable that set a bad
//! value by its name, the TOML line it is on, and the value expected without Rust's type names.

use std::path::Path;

/// `LINEAGE_` + the key path upper-cased, `__` between tables: `lease.lease_ms` ->
/// `LINEAGE_LEASE__LEASE_MS` (figment's `Env::prefixed("LINEAGE_").split("__")`).
pub(crate) fn env_var_of(key: &str) -> String {
    format!("LINEAGE_{}", key.to_uppercase().replace('.', "__"))
}

/// The 1-based line of `key` (a dotted path) in the TOML `text`: the line `name = ...` under
/// the table that holds it (`[a.b]` for `a.b.name`; the top for `name`). Best effort: keys
/// written inline (`a = { b = 1 }`) or dotted (`a.b = 1`) are not found.
pub(crate) fn toml_line(text: &str, key: &str) -> Option<usize> {
    let (table, name) = match key.rsplit_once('.') {
        Some((table, name)) => (table, name),
        None => ("", key),
    };
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            current = header
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .to_owned();
            continue;
        }
        let Some((left, _)) = line.split_once('=') else {
            continue;
        };
        let left = left.trim().trim_matches('"');
        if current == table && left == name {
            return Some(i + 1);
        }
    }
    None
}

/// [`toml_line`] of the file at `path`.
pub(crate) fn toml_line_in(path: &Path, key: &str) -> Option<usize> {
    toml_line(&std::fs::read_to_string(path).ok()?, key)
}

/// Serde's expectation in words: `expected u64` -> `expected a whole number` (config errors;
/// the CLI's script errors too).
pub fn plain(what: &str) -> String {
    let mut out = what.to_owned();
    for (rust, words) in [
        ("expected u64", "expected a whole number"),
        ("expected u32", "expected a whole number"),
        ("expected u16", "expected a whole number"),
        ("expected u8", "expected a whole number"),
        ("expected usize", "expected a whole number"),
        ("expected i64", "expected a whole number"),
        ("expected i32", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected a boolean", "expected true or false"),
        ("expected bool", "expected true or false"),
    ] {
        out = out.replace(rust, words);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_variable_the_line_and_the_value_in_words() {
        assert_eq!(env_var_of("lease.lease_ms"), "LINEAGE_LEASE__LEASE_MS");
        assert_eq!(env_var_of("cluster"), "LINEAGE_CLUSTER");
        let text = "cluster = \"dev\"\n\n[lease]\n# how long\nlease_ms = \"abc\"\n[registry.voters]\n\"1\" = \"node-1\"\n";
        assert_eq!(toml_line(text, "lease.lease_ms"), Some(5));
        assert_eq!(toml_line(text, "cluster"), Some(1));
        assert_eq!(toml_line(text, "registry.voters.1"), Some(7));
        assert_eq!(toml_line(text, "lease.grace_ms"), None);
        assert_eq!(
            plain("invalid type: found string \"abc\", expected u64"),
            "invalid type: found string \"abc\", expected a whole number"
        );
        assert_eq!(plain("expected a boolean"), "expected true or false");
    }
}
