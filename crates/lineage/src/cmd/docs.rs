//! `lineage docs cli-reference` (a hidden verb): the CLI reference, `docs/cli.md`, generated
//! from the clap definitions by `clap-markdown`. Before it renders, each command is adapted
//! for markdown: an argument's environment variable is added to its help (clap-markdown does
//! not print it), and a verb's `Example:` lines become a code block. The global flags live on
//! the top command only (its definition is not built, so clap has not copied them to every
//! verb): the reference shows them once. A unit test fails when `docs/cli.md` differs.

use clap::CommandFactory;
use lineage_bus::control::ControlError;

/// `docs` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum DocsVerb {
    /// Print the CLI reference (`docs/cli.md`) as markdown, generated from the CLI itself.
    #[command(after_help = "Example:\n  lineage docs cli-reference > docs/cli.md")]
    CliReference,
}

/// Runs a `docs` verb.
pub(crate) fn run(verb: DocsVerb) -> Result<(), ControlError> {
    match verb {
        DocsVerb::CliReference => print!("{}", cli_reference()),
    }
    Ok(())
}

/// What `docs/cli.md` holds: the reference of every visible verb and flag.
pub fn cli_reference() -> String {
    let command = for_markdown(crate::cli::Cli::command());
    let options = clap_markdown::MarkdownOptions::new()
        .title("CLI reference".to_owned())
        .show_footer(false)
        .show_table_of_contents(true);
    let body = clap_markdown::help_markdown_command_custom(&command, &options);
    let stock =
        "This document contains the help content for the `lineage` command-line program.\n\n";
    let body = body
        .replacen(stock, PREAMBLE, 1)
        .replace("Default value: ``\n", "Default value: empty\n");
    // One newline at the end, as an editor saves it.
    format!("{}\n", body.trim_end())
}

/// What the reference says before the verbs.
const PREAMBLE: &str = "\
Every verb and flag of `lineage`, generated from its own definitions by `lineage docs \
cli-reference > docs/cli.md` (a test fails when this file differs); `lineage <verb> --help` \
prints the same. The options of `lineage` itself (the first section: the NATS URL, the cluster \
name, `--json`, credentials and TLS) work with every verb, before or after it; a flag wins over \
its environment variable. Errors are one line; exit codes: 0 ok, 1 failed (`spawn --wait`: the \
turn did not complete), 2 bad request, 3 not found, 4 refused, 5 unavailable. \
[concepts.md](concepts.md) explains the words the verbs print.\n\n";

/// `command` and its subcommands adapted for markdown (see the module doc).
fn for_markdown(command: clap::Command) -> clap::Command {
    let mut command = command.mut_args(with_env_in_help);
    if let Some(after) = command.get_after_help().map(ToString::to_string) {
        command = command.after_help(examples_as_code(&after));
    }
    command.mut_subcommands(for_markdown)
}

/// `arg` with its environment variable (`[env: NATS_URL]`) at the end of its help.
fn with_env_in_help(arg: clap::Arg) -> clap::Arg {
    let Some(env) = arg.get_env().map(|e| e.to_string_lossy().into_owned()) else {
        return arg;
    };
    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
    let long = arg.get_long_help().map(ToString::to_string);
    let arg = arg.help(format!("{help} [env: {env}]"));
    match long {
        Some(long) => arg.long_help(format!("{long} [env: {env}]")),
        None => arg,
    }
}

/// An `after_help` such as `"Example:\n  lineage tree 0193...\n  lineage tree --json"`: its
/// first line, then the indented lines as a code block.
fn examples_as_code(after: &str) -> String {
    let mut lines = after.lines();
    let title = lines.next().unwrap_or_default();
    let code: Vec<&str> = lines.map(|l| l.strip_prefix("  ").unwrap_or(l)).collect();
    if code.is_empty() {
        return title.to_owned();
    }
    format!("{title}\n\n```text\n{}\n```", code.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_cli_md_is_the_generated_reference() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == cli_reference(),
            "docs/cli.md is out of date: run `lineage docs cli-reference > docs/cli.md`"
        );
    }

    #[test]
    fn the_reference_shows_each_verb_env_vars_and_the_global_flags_once() {
        let md = cli_reference();
        for verb in ["spawn", "tree", "drain", "config show", "workspace diff"] {
            assert!(md.contains(&format!("## `lineage {verb}`")), "{verb}");
        }
        assert_eq!(md.matches("`--nats <NATS>`").count(), 1, "{md}");
        assert!(md.contains("[env: NATS_URL]"));
        assert!(md.contains("```text\nlineage tree 0193...root\n"));
        assert!(!md.contains("## `lineage docs"), "the docs verb is hidden");
    }

    #[test]
    fn examples_become_a_code_block() {
        assert_eq!(
            examples_as_code("Example:\n  lineage a\n  lineage b   # c"),
            "Example:\n\n```text\nlineage a\nlineage b   # c\n```"
        );
        assert_eq!(examples_as_code("Example:"), "Example:");
    }
}
