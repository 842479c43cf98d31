//! Running the commands in order: each one's expectation checked, placeholders filled, the
//! background commands ([`Expect::Until`]) stopped when their turn comes.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use lineage_testkit::poll;

use crate::expectations::Expect::{self, DevCluster, Exits, Sets, Skip, Until, Writes};
use crate::parse::{first_line, matching_line, placeholders, substitute, tail, DocCommand};
use crate::shell::{stop_group, LineageDev, Shell};

/// What the run keeps from one command to the next.
pub struct Runner<'a> {
    pub shell: Shell,
    pub cluster: &'a LineageDev,
    /// The optional tools (natscli, helm): where each is, if installed.
    pub tools: BTreeMap<&'static str, Option<PathBuf>>,
    /// Placeholder values found so far.
    values: HashMap<String, String>,
    /// Commands running in the background, oldest first.
    background: Vec<Background>,
    /// A block whose first command needed a missing tool: (file, block, why).
    skip_block: Option<(String, usize, String)>,
    pub ran: usize,
    pub skipped: Vec<String>,
    pub failures: Vec<String>,
}

impl<'a> Runner<'a> {
    pub fn new(
        shell: Shell,
        cluster: &'a LineageDev,
        tools: BTreeMap<&'static str, Option<PathBuf>>,
    ) -> Runner<'a> {
        Runner {
            shell,
            cluster,
            tools,
            values: HashMap::new(),
            background: Vec::new(),
            skip_block: None,
            ran: 0,
            skipped: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// Why `cmd` is not run here, if it is not.
    fn skip_reason(&mut self, cmd: &DocCommand, e: Option<Expect>) -> Option<String> {
        let file = cmd.file().to_owned();
        if let Some(r) = &cmd.block_skip {
            return Some(format!("the page: {r}"));
        }
        if let Some(Skip(r)) = e {
            return Some(r.to_owned());
        }
        let tools = &self.tools;
        if let Some(tool) = optional_tool(&cmd.text).filter(|t| tools[t].is_none()) {
            let r = format!("{tool} is not installed (scripts/install-deps.sh installs it)");
            self.skip_block = Some((file, cmd.block, format!("{}: {r}", cmd.at)));
            return Some(r);
        }
        self.skip_block
            .as_ref()
            .filter(|(f, b, _)| *f == file && *b == cmd.block)
            .map(|(_, _, why)| format!("it builds on a skipped command ({why})"))
    }

    /// Runs one command of a page (or skips it, saying why) and checks it against `e`.
    pub fn command(&mut self, cmd: &DocCommand, e: Option<Expect>) {
        if let Some(reason) = self.skip_reason(cmd, e) {
            let line = format!("{}: `{}`: {reason}", cmd.at, first_line(&cmd.text));
            eprintln!("docs: SKIP {line}");
            self.skipped.push(line);
            self.tick();
            return;
        }
        let Some(e) = e else {
            unreachable!("checked before the run")
        };
        if let DevCluster(line) = e {
            let out = self.cluster.output();
            match matching_line(line, &out, "") {
                Some(m) => eprintln!(
                    "docs: ok   {}: `{}` (run as `lineage dev` by this test): {m}",
                    cmd.at, cmd.text
                ),
                None => self.failures.push(format!(
                    "{}: `{}` (`lineage dev`) printed no line matching {line:?}:\n{}",
                    cmd.at,
                    cmd.text,
                    tail(&out, 8)
                )),
            }
            self.ran += 1;
            self.tick();
            return;
        }

        // Placeholders, from values found once.
        for name in placeholders(&cmd.text) {
            if let Err(why) = self.resolve(&name) {
                let f = format!("{}: `{}`: {why}", cmd.at, cmd.text);
                eprintln!("docs: FAIL {f}");
                self.failures.push(f);
                self.tick();
                return;
            }
        }
        let text = substitute(&cmd.text, &self.values);

        self.ran += 1;
        let outcome = match e {
            Exits(code, line) => {
                let got = self.shell.run(&text);
                let (o, e, t) = (&got.stdout, &got.stderr, got.timed_out);
                check(cmd, code, line, got.code, o, e, t).map(|m| format!("exit {code}, {m:?}"))
            }
            Until {
                ready,
                after,
                line,
                code,
            } => {
                self.tick();
                self.start_background(cmd, &text, ready, after, line, code);
                return;
            }
            Sets { var, value } => {
                let got = self.shell.run(&text);
                let set = self.shell.run(&format!("printf '%s' \"${{{var}}}\""));
                if got.code != 0 || got.timed_out {
                    check(cmd, 0, "", got.code, &got.stdout, &got.stderr, got.timed_out)
                } else {
                    check(cmd, 0, value, 0, &set.stdout, "", false).map_err(|_| {
                        format!(
                            "{}: `{}` set ${var} to {:?}, which does not match {value:?}\n  stderr: {}",
                            cmd.at,
                            cmd.text,
                            set.stdout,
                            tail(&got.stderr, 8)
                        )
                    })
                }
                .map(|v| format!("exit 0, ${var}={v}"))
            }
            Writes { path, line } => {
                let got = self.shell.run(&text);
                let written = std::fs::read_to_string(path).unwrap_or_default();
                if got.code != 0 || got.timed_out {
                    check(
                        cmd,
                        0,
                        line,
                        got.code,
                        &got.stdout,
                        &got.stderr,
                        got.timed_out,
                    )
                } else {
                    check(cmd, 0, line, 0, &written, "", false).map_err(|_| {
                        format!(
                            "{}: `{}` wrote no line matching {line:?} to {path}:\n{}\n  stderr: {}",
                            cmd.at,
                            cmd.text,
                            tail(&written, 8),
                            tail(&got.stderr, 8)
                        )
                    })
                }
                .map(|m| format!("exit 0, {path}: {m:?}"))
            }
            Skip(_) | DevCluster(_) => unreachable!("handled above"),
        };
        self.report(cmd, outcome);
        self.tick();
    }

    /// Starts an [`Expect::Until`] command in the background, once its `ready` line shows.
    fn start_background(
        &mut self,
        cmd: &DocCommand,
        text: &str,
        ready: &'static str,
        after: usize,
        line: &'static str,
        code: i32,
    ) {
        let (child, out, err) = self.shell.start(text, false);
        let b = Background {
            cmd: cmd.clone(),
            child,
            out,
            err,
            left: after,
            line,
            code,
        };
        if ready.is_empty() {
            std::thread::sleep(Duration::from_secs(2));
        } else {
            let started = Instant::now();
            let seen = poll(Duration::from_secs(15), || {
                let (o, e) = b.output();
                matching_line(ready, &o, &e).is_some()
            });
            if seen.is_err() {
                let (o, e) = b.output();
                let f = format!(
                    "{}: `{}` showed no line matching {ready:?} within {:?}\n  stdout: {}\n  stderr: {}",
                    cmd.at,
                    cmd.text,
                    started.elapsed(),
                    tail(&o, 5),
                    tail(&e, 5)
                );
                eprintln!("docs: FAIL {f}");
                self.failures.push(f);
                return; // dropped: stopped by its process group
            }
        }
        eprintln!(
            "docs: bg   {}: `{}` runs while the next {after} commands run",
            cmd.at,
            first_line(&cmd.text)
        );
        self.background.push(b);
    }

    /// Stops and checks what still runs in the background.
    pub fn finish(&mut self) {
        for b in std::mem::take(&mut self.background) {
            self.finish_background(b);
        }
    }

    /// Prints a command's outcome; a failure is kept for the end.
    fn report(&mut self, cmd: &DocCommand, outcome: Result<String, String>) {
        match outcome {
            Ok(what) => eprintln!("docs: ok   {}: `{}`: {what}", cmd.at, first_line(&cmd.text)),
            Err(f) => {
                eprintln!("docs: FAIL {f}");
                self.failures.push(f);
            }
        }
    }

    /// One command has gone by: background commands whose `after` is used up are stopped and
    /// checked.
    fn tick(&mut self) {
        for b in self.background.iter_mut() {
            b.left = b.left.saturating_sub(1);
        }
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.background)
            .into_iter()
            .partition(|b| b.left == 0);
        self.background = running;
        for b in done {
            self.finish_background(b);
        }
    }

    fn finish_background(&mut self, b: Background) {
        let at = format!("{}: `{}`", b.cmd.at, first_line(&b.cmd.text));
        match b.finish() {
            Ok(m) => eprintln!("docs: ok   {at} (stopped): {m:?}"),
            Err(f) => {
                eprintln!("docs: FAIL {f}");
                self.failures.push(f);
            }
        }
    }

    /// Finds the value of placeholder `name` (once; `<id>` is `<parent>`'s value).
    fn resolve(&mut self, name: &str) -> Result<(), String> {
        if self.values.contains_key(name) {
            return Ok(());
        }
        let source_name = if name == "id" { "parent" } else { name };
        if let Some(v) = self.values.get(source_name).cloned() {
            self.values.insert(name.to_owned(), v);
            return Ok(());
        }
        let value = if source_name == "http-port" {
            // node-1's HTTP port, from what `lineage dev` printed:
            // `  node-1  http://127.0.0.1:PORT/metrics  log ...`.
            let out = self.cluster.output();
            let port = out.lines().find_map(|l| {
                let rest = l.trim_start().strip_prefix("node-1  http://127.0.0.1:")?;
                Some(rest.split('/').next()?.to_owned())
            });
            port.ok_or_else(|| {
                format!("cannot fill <{name}>: `lineage dev` printed no node-1 address")
            })?
        } else {
            let Some(source) = placeholder_source(source_name) else {
                return Err(format!(
                    "names <{name}>, which the test cannot fill: add it to placeholder_source() in tests/o1_docs_verbatim/runner.rs"
                ));
            };
            let got = self.shell.run(source);
            let value = got.stdout.trim().to_owned();
            if got.code != 0
                || value.is_empty()
                || value == "null"
                || value.contains(char::is_whitespace)
            {
                return Err(format!(
                    "cannot fill <{name}>: `{source}` exited {} with {value:?}: {}",
                    got.code,
                    tail(&got.stderr, 3)
                ));
            }
            value
        };
        eprintln!("docs: <{name}> = {value}");
        self.values.insert(source_name.to_owned(), value.clone());
        self.values.insert(name.to_owned(), value);
        Ok(())
    }
}

/// The bash (run in the commands' state) that prints a placeholder's value (`<http-port>` is
/// read from `lineage dev`'s output instead).
fn placeholder_source(name: &str) -> Option<&'static str> {
    Some(match name {
        "root" => r#"printf '%s' "$ROOT""#,
        "child" => {
            r#"lineage --json tree "$ROOT" | jq -r --arg r "$ROOT" '[.[] | select(.parent == $r)][0].session'"#
        }
        "parent" => {
            r#"lineage --json spawn --shape continuable --prompt parent --script '{"turns":[[{"do":"spawn","shape":"continuable","prompt":"part","agent":{"driver":"script","script":{"turns":[[{"do":"report","content":"part started","delivery":"quiet"},{"do":"reply","text":"part done"}]],"after":{"do":"echo"}}}}]],"after":{"do":"echo"}}' | jq -r .session"#
        }
        "drain" => "printf readme-drain",
        _ => return None,
    })
}

/// The tools a command needs that may be missing here, by the words it runs.
fn optional_tool(text: &str) -> Option<&'static str> {
    let first = text
        .split_whitespace()
        .find(|w| !w.contains('='))
        .unwrap_or("");
    match first {
        "nats" => Some("nats"),
        "helm" => Some("helm"),
        _ => None,
    }
}

/// A command running in the background ([`Expect::Until`]).
struct Background {
    cmd: DocCommand,
    child: Child,
    out: PathBuf,
    err: PathBuf,
    left: usize,
    line: &'static str,
    code: i32,
}

impl Background {
    fn output(&self) -> (String, String) {
        (
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default(),
        )
    }

    /// Waits (15 s at most) for its line, stops it with SIGINT; a failure message, if any.
    fn finish(mut self) -> Result<String, String> {
        let _ = poll(Duration::from_secs(15), || {
            let (o, e) = self.output();
            matching_line(self.line, &o, &e).is_some()
        });
        let code = stop_group(&mut self.child, "INT", Duration::from_secs(10));
        let (o, e) = self.output();
        check(&self.cmd, self.code, self.line, code, &o, &e, false)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        stop_group(&mut self.child, "KILL", Duration::from_secs(1));
    }
}

/// Checks a command's outcome against its expectation: Ok(the matching line) or the failure.
fn check(
    cmd: &DocCommand,
    want_code: i32,
    line: &str,
    code: i32,
    stdout: &str,
    stderr: &str,
    timed_out: bool,
) -> Result<String, String> {
    let matched = matching_line(line, stdout, stderr);
    if !timed_out && code == want_code {
        if let Some(m) = matched {
            return Ok(m.to_owned());
        }
    }
    let what = if timed_out {
        "did not finish within 60 s".to_owned()
    } else if code != want_code {
        format!("exited {code}, expected {want_code}")
    } else {
        format!("printed no line matching {line:?}")
    };
    Err(format!(
        "{at}: `{text}` {what}\n  stdout: {out}\n  stderr: {err}",
        at = cmd.at,
        text = cmd.text,
        out = tail(stdout, 8).replace('\n', "\n          "),
        err = tail(stderr, 8).replace('\n', "\n          "),
    ))
}
