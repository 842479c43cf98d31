//! The docs' commands are tested verbatim (issue 15, issue 37): the fenced ```sh blocks of
//! `README.md`, the pages of `docs/` and `charts/lineage/README.md`
//! ([`expectations::PAGES`], in that order), parsed at test time, run in order against a
//! `lineage dev` cluster, each command checked for its exit code and one line of its output.
//!
//! How a page is read ([`parse`]):
//! - A command is a line of a ```sh block, with the lines after it while a line ends in `\`;
//!   blank lines and comment-only lines are not commands. Its text (lines joined by `\n`, the
//!   fence's indentation removed) is its key in the expectations.
//! - `<!-- readme-test: skip: REASON -->` on the line before a fence skips that block (it cannot
//!   run here: docker, a real Kubernetes, a real model); an expectation [`Expect::Skip`] skips
//!   one command. The test prints every skip with its reason.
//! - Every command must have an expectation and every expectation a command: a missing or a
//!   stale one fails the test with one line naming the command. A command two pages show
//!   verbatim has one expectation, and runs on each page.
//! - Every `docs/*.md` is in [`expectations::PAGES`] or in [`expectations::NOT_RUN`] (with the
//!   reason: `docs/cli.md` is generated, the spec pages have no commands).
//! - An expected line matches when it holds the expectation's parts (split at `*`) in order.
//!
//! The expectations are in `expectations/`, one file per page or group of pages, in the order
//! of the pages; the processes and the shell are in [`shell`], the run in [`runner`].
//!
//! How a command runs: its text verbatim as a bash script (`set -e` off; a `# comment` on the
//! line is bash's), cwd the workspace root, stdin `/dev/null`, in its own process group, with
//! `lineage` on PATH (the directory of `lineage_bin()` first, then `~/go/bin` for natscli and
//! helm), `NATS_URL` the cluster's, and HOME and XDG_CONFIG_HOME in a temp dir (natscli's
//! contexts land there, never in the real HOME). Shell variables and functions a command sets
//! (`ROOT=$(...)`, `export ...`) are saved after it and loaded before the next (one state file),
//! so later commands, on any later page, see them.
//!
//! The cluster is the docs' own: `lineage dev --nats-port <free> --dir <temp>`, what
//! `scripts/dev.sh` runs after its build and what `docs/getting-started.md` starts (the test
//! stands it in for those commands and checks their output); it is stopped by pid at the end
//! (SIGTERM, then SIGKILL of it and every descendant). `scripts/test.sh` is skipped (it would
//! run this test).
//!
//! Placeholders: a `<name>` in a command is replaced before it runs by a value the test finds
//! with `lineage` in the same shell state (so `$ROOT` is the README's own), once, on first use:
//! - `<root>`: `$ROOT`, the root the README's tour spawned;
//! - `<child>`: the first child of `$ROOT`, from `lineage --json tree $ROOT`;
//! - `<parent>`: a live continuable root the test spawns (its first turn spawns a child that
//!   reports once); the README's `$ROOT` is drained by the time the natscli commands run;
//! - `<id>`: a session with an event log: the session `<parent>` stands for;
//! - `<drain>`: a drain id, `readme-drain`;
//! - `<http-port>`: node-1's HTTP port, from what `lineage dev` printed.
//!
//! A command expected to run until stopped (`nats sub`, `lineage watch`: [`Expect::Until`])
//! runs in the background while the next `after` commands run, as in another terminal; then,
//! once its expected line shows (or 15 s passed), it gets SIGINT (Ctrl-C).
//!
//! natscli (`nats`, v0.5.0) and helm come from `~/go/bin` or PATH (`scripts/install-deps.sh`
//! installs both); when one is missing, its commands and the rest of their block are skipped,
//! with the reason printed. jq and curl are required (the pages' commands use them).

mod expectations;
mod parse;
mod runner;
mod shell;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lineage_testkit::{lineage_bin, workspace_root};

use expectations::{Expect, NOT_RUN, PAGES};
use parse::{parse_page, DocCommand};
use runner::Runner;
use shell::{find_tool, LineageDev, Shell};

/// The commands of every page of [`PAGES`], in order.
fn commands() -> Vec<DocCommand> {
    let root = workspace_root();
    let mut commands = Vec::new();
    for file in PAGES {
        let text =
            std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("read {file}: {e}"));
        commands.extend(parse_page(file, &text));
    }
    commands
}

#[test]
fn o1_every_docs_page_is_run_or_says_why_not() {
    let docs = workspace_root().join("docs");
    let mut left_out = Vec::new();
    for entry in std::fs::read_dir(&docs).expect("read docs/").flatten() {
        let name = format!("docs/{}", entry.file_name().to_string_lossy());
        let listed = PAGES.contains(&name.as_str()) || NOT_RUN.iter().any(|(p, _)| *p == name);
        if name.ends_with(".md") && !listed {
            left_out.push(name);
        }
    }
    assert!(
        left_out.is_empty(),
        "{left_out:?}: add each to PAGES (its commands run) or NOT_RUN (with why) in tests/o1_docs_verbatim/expectations/mod.rs"
    );
    if let Err(problems) = expectations::in_step(&commands()) {
        panic!("{}", problems.join("\n"));
    }
}

#[test]
fn o1_docs_commands_run_verbatim_against_lineage_dev() {
    let commands = commands();
    assert!(!commands.is_empty(), "no ```sh command in {PAGES:?}");
    // Expectations and commands stay in step, before anything runs.
    let expect = expectations::in_step(&commands).unwrap_or_else(|p| panic!("{}", p.join("\n")));

    for tool in ["jq", "curl"] {
        assert!(
            find_tool(tool).is_some(),
            "{tool} is missing: the docs' commands use it (apt-get install {tool}; scripts/install-deps.sh tries jq)"
        );
    }
    let tools: BTreeMap<&str, Option<PathBuf>> =
        [("nats", find_tool("nats")), ("helm", find_tool("helm"))]
            .into_iter()
            .collect();
    for (name, path) in &tools {
        match path {
            Some(p) => eprintln!("docs: {name} is {}", p.display()),
            None => eprintln!("docs: {name} is not installed: its commands are skipped (scripts/install-deps.sh installs it)"),
        }
    }

    // `lineage dev` offers the `acp-testagent` profile only when the test agent is built next
    // to it.
    let agent = lineage_bin().with_file_name("lineage-acp-testagent");
    assert!(
        agent.is_file(),
        "{} is missing (the docs spawn --profile acp-testagent): cargo build --workspace --bins",
        agent.display()
    );
    let temp = tempfile::Builder::new()
        .prefix("o1-docs-")
        .tempdir()
        .expect("a temp dir");
    let home = temp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let cluster = LineageDev::start(temp.path());
    eprintln!("docs: lineage dev is up at {}", cluster.url);

    // PATH: the lineage under test first, then the tools found, then the test's own PATH.
    let mut path_dirs: Vec<PathBuf> = vec![lineage_bin()
        .parent()
        .expect("the binary's directory")
        .to_path_buf()];
    path_dirs.extend(
        tools
            .values()
            .flatten()
            .filter_map(|p| p.parent().map(Path::to_path_buf)),
    );
    path_dirs.extend(
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    let path = std::env::join_paths(path_dirs)
        .expect("a PATH")
        .into_string()
        .expect("a UTF-8 PATH");
    let mut env = vec![
        ("PATH".to_owned(), path),
        ("HOME".to_owned(), home.display().to_string()),
        // natscli finds its contexts here, not under $HOME (lineage reads the same).
        (
            "XDG_CONFIG_HOME".to_owned(),
            home.join(".config").display().to_string(),
        ),
        ("NATS_URL".to_owned(), cluster.url.clone()),
        ("TMPDIR".to_owned(), temp.path().display().to_string()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ];
    if let Ok(filter) = std::env::var("RUST_LOG") {
        env.push(("RUST_LOG".to_owned(), filter));
    }
    let shell = Shell {
        dir: temp.path().to_path_buf(),
        env,
        state: temp.path().join("state.sh"),
        n: 0,
    };

    let (ran, skipped, failures) = {
        let mut run = Runner::new(shell, &cluster, tools);
        for cmd in &commands {
            let e: Option<Expect> = expect.get(cmd.text.as_str()).copied();
            run.command(cmd, e);
        }
        run.finish();
        (run.ran, run.skipped, run.failures)
    };
    drop(cluster);

    eprintln!("docs: {ran} commands run, {} skipped:", skipped.len());
    for s in &skipped {
        eprintln!("  {s}");
    }
    assert!(
        failures.is_empty(),
        "{} command(s) did not do what the docs say:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
