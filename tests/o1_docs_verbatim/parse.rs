//! Reading a page: its ```sh commands, their placeholders, and matching their output.

use std::collections::HashMap;

/// The annotation that skips the block after it.
pub const SKIP_ANNOTATION: &str = "<!-- readme-test: skip:";

/// One command of a page.
#[derive(Debug, Clone)]
pub struct DocCommand {
    /// `docs/page.md:LINE`.
    pub at: String,
    /// Its exact text (lines joined by `\n`).
    pub text: String,
    /// The block's skip annotation, if any.
    pub block_skip: Option<String>,
    /// Which block of the file (commands of one block share a number).
    pub block: usize,
}

impl DocCommand {
    /// The page it is on (`docs/page.md`).
    pub fn file(&self) -> &str {
        self.at.rsplit_once(':').map_or("", |(f, _)| f)
    }
}

/// The commands of the ```sh blocks of `text` (the page `file`), in order.
pub fn parse_page(file: &str, text: &str) -> Vec<DocCommand> {
    let lines: Vec<&str> = text.lines().collect();
    let mut commands = Vec::new();
    let mut block = 0;
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let indent = lines[i].len() - trimmed.len();
        if trimmed.trim_end() != "```sh" {
            i += 1;
            continue;
        }
        block += 1;
        let block_skip = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.trim().strip_prefix(SKIP_ANNOTATION))
            .map(|rest| rest.trim_end_matches("-->").trim().to_owned());
        i += 1;
        let mut current: Option<(usize, Vec<String>)> = None;
        while i < lines.len() && lines[i].trim() != "```" {
            let line = lines[i].get(indent.min(lines[i].len() - lines[i].trim_start().len())..);
            let line = line.unwrap_or("").trim_end().to_owned();
            i += 1;
            match current.as_mut() {
                Some((_, parts)) => parts.push(line),
                None if line.trim().is_empty() || line.trim_start().starts_with('#') => continue,
                None => current = Some((i, vec![line])),
            }
            let continues = current
                .as_ref()
                .is_some_and(|(_, parts)| parts.last().is_some_and(|l| l.ends_with('\\')));
            if !continues {
                if let Some((at, parts)) = current.take() {
                    commands.push(DocCommand {
                        at: format!("{file}:{at}"),
                        text: parts.join("\n"),
                        block_skip: block_skip.clone(),
                        block,
                    });
                }
            }
        }
        assert!(
            current.is_none(),
            "{file}: a ```sh block ends inside a command continued with `\\`"
        );
        i += 1;
    }
    commands
}

/// The line of `stdout`/`stderr` that matches `pattern`: it holds the pattern's parts (split at
/// `*`) in that order (so `leader*term` is "leader", then later "term").
pub fn matching_line<'a>(pattern: &str, stdout: &'a str, stderr: &'a str) -> Option<&'a str> {
    stdout
        .lines()
        .chain(stderr.lines())
        .find(|line| glob_in(pattern, line))
}

/// Whether `line` holds the parts of `pattern` (split at `*`) in order.
fn glob_in(pattern: &str, line: &str) -> bool {
    let mut rest = line;
    for part in pattern.split('*') {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// The last `n` lines of `text`, for a failure message.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The first line of a command, for a one-line report.
pub fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// The code of one line of a command, without its `# comment` (a `#` starting a word outside
/// quotes, as bash reads it).
fn code_of(line: &str) -> &str {
    let (mut single, mut double, mut escaped) = (false, false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

/// The placeholders a command names (`<word>` or `<word-word>`) outside its comments, in order.
pub fn placeholders(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        found.extend(placeholders_in(code_of(line)));
    }
    found
}

/// The placeholders of `code`.
fn placeholders_in(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect();
        if !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && rest[name.len()..].starts_with('>')
        {
            found.push(name);
        }
    }
    found
}

/// `text` with each placeholder outside its comments replaced by its value.
pub fn substitute(text: &str, values: &HashMap<String, String>) -> String {
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let code = code_of(line);
            let mut new = code.to_owned();
            for (name, value) in values {
                new = new.replace(&format!("<{name}>"), value);
            }
            new + &line[code.len()..]
        })
        .collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o1_the_parser_reads_blocks_continuations_annotations_and_placeholders() {
        let text = "intro\n\n```sh\nlineage status   # leader\nX=$(a \\\n  b)\n# a comment\n\necho $X\n```\n\n<!-- readme-test: skip: needs docker -->\n```sh\ndocker build .\n```\n\n1. item\n\n   ```sh\n   helm template x \\\n     | awk 1\n   ```\n```json\n{}\n```\n";
        let cmds = parse_page("R.md", text);
        let texts: Vec<&str> = cmds.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "lineage status   # leader",
                "X=$(a \\\n  b)",
                "echo $X",
                "docker build .",
                "helm template x \\\n  | awk 1"
            ]
        );
        assert_eq!(cmds[0].at, "R.md:4");
        assert_eq!(cmds[2].at, "R.md:9");
        assert_eq!(cmds[3].block_skip.as_deref(), Some("needs docker"));
        assert!(cmds[0].block_skip.is_none() && cmds[4].block_skip.is_none());
        assert_eq!(
            placeholders("nats sub 'lineage.dev.parent.<parent>.>' <child> 2>/dev/null <parent>"),
            ["parent", "child", "parent"]
        );
        let line = "lineage interrupt <child> --as-user $ROOT   # or --as-ancestor <session>";
        assert_eq!(placeholders(line), ["child"]);
        assert_eq!(
            code_of("echo '# not' \"#\" a#b # c <x>"),
            "echo '# not' \"#\" a#b "
        );
        let values = HashMap::from([("child".to_owned(), "C1".to_owned())]);
        assert_eq!(
            substitute(line, &values),
            "lineage interrupt C1 --as-user $ROOT   # or --as-ancestor <session>"
        );
        assert_eq!(
            matching_line("leader*node-", "x\nleader   node-2", ""),
            Some("leader   node-2")
        );
        assert!(matching_line("node-*leader", "leader   node-2", "").is_none());
        assert_eq!(
            matching_line("stays up", "", "the cluster stays up; try:"),
            Some("the cluster stays up; try:")
        );
        assert!(matching_line("absent", "a", "b").is_none());
    }
}
