//! What each command of the pages must do here, one file per page (or group of pages), and the
//! pages themselves, in the order they run.

mod chart;
mod getting_started;
mod nats;
mod operations;
mod readme;

use std::collections::{HashMap, HashSet};

use crate::parse::DocCommand;

/// The pages whose ```sh blocks run, relative to the workspace root, in this order: later
/// pages may use what earlier ones set (`docs/nats.md` logs in with the passwords
/// `docs/security.md` exports).
pub const PAGES: [&str; 10] = [
    "README.md",
    "docs/a2a.md",
    "docs/getting-started.md",
    "docs/concepts.md",
    "docs/deploy.md",
    "docs/security.md",
    "docs/monitoring.md",
    "docs/nats.md",
    "docs/script.md",
    "charts/lineage/README.md",
];

/// The pages of `docs/` whose commands do not run, and why. Every other `docs/*.md` must be in
/// [`PAGES`], so a new page is never left out.
pub const NOT_RUN: [(&str, &str); 3] = [
    (
        "docs/cli.md",
        "generated from the CLI; its examples are `text` blocks with made-up ids",
    ),
    (
        "docs/requirements.md",
        "the requirements, a spec page without commands",
    ),
    (
        "docs/reliability.md",
        "the fault model, a spec page without commands",
    ),
];

/// What a command must do here.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// Exits with this code, and a line of its stdout or stderr matches `line` (see
    /// [`crate::parse::matching_line`]).
    Exits(i32, &'static str),
    /// Runs until stopped: started in the background; the test waits until a line matches
    /// `ready` (empty: a 2 s pause), runs the next `after` commands, waits (15 s at most) for
    /// a line matching `line`, then sends SIGINT (Ctrl-C) to its process group; it must exit
    /// with `code` (as a shell reports it: 130 when the SIGINT ended it; `lineage watch`
    /// catches it and exits 0).
    Until {
        ready: &'static str,
        after: usize,
        line: &'static str,
        code: i32,
    },
    /// Exits 0 and sets the shell variable `var` to a value matching `value` (an assignment
    /// such as `ROOT=$(...)` prints nothing; what it sets is its output).
    Sets {
        var: &'static str,
        value: &'static str,
    },
    /// Exits 0 and writes the file `path`, a line of which matches `line` (its output goes
    /// there).
    Writes {
        path: &'static str,
        line: &'static str,
    },
    /// Not run, for this reason (printed).
    Skip(&'static str),
    /// `scripts/dev.sh` or `lineage dev`: the test's own `lineage dev` stands for it (same
    /// binary, same command); a line of its output must match.
    DevCluster(&'static str),
}

/// Every command's expectation, keyed by its exact text. A command that two pages show
/// verbatim has one expectation (it runs on each page).
pub fn all() -> Vec<(&'static str, Expect)> {
    let mut all = readme::expectations();
    all.extend(getting_started::expectations());
    all.extend(operations::expectations());
    all.extend(nats::expectations());
    all.extend(chart::expectations());
    all
}

/// The expectations by command, once the commands and the expectations are in step: every
/// command outside a skipped block has one, every expectation has a command, and no command
/// has two. Otherwise every problem, one line each.
pub fn in_step(commands: &[DocCommand]) -> Result<HashMap<&'static str, Expect>, Vec<String>> {
    let table = all();
    let mut expect: HashMap<&str, Expect> = HashMap::new();
    let mut problems = Vec::new();
    for (text, e) in &table {
        if expect.insert(text, *e).is_some() {
            problems.push(format!("two expectations for `{text}`"));
        }
    }
    let mut shown = HashSet::new();
    for c in commands {
        shown.insert(c.text.as_str());
        match (&c.block_skip, expect.contains_key(c.text.as_str())) {
            (None, false) => problems.push(format!(
                "{}: `{}` has no expectation: add one to tests/o1_docs_verbatim/expectations/ (exit code and a line of its output, or Skip with the reason)",
                c.at, c.text
            )),
            (Some(reason), true) => problems.push(format!(
                "{}: `{}` is in a block the page skips ({reason}); remove its expectation",
                c.at, c.text
            )),
            _ => {}
        }
    }
    for (text, _) in &table {
        if !shown.contains(text) {
            problems.push(format!(
                "expectation for `{text}`, which is no longer a command of {PAGES:?}: remove it or fix its text"
            ));
        }
    }
    if problems.is_empty() {
        Ok(expect)
    } else {
        Err(problems)
    }
}
