//! [`Script`]: a builder of the script driver's JSON (`{"turns": [[step, ...], ...],
//! "after": step}`), so a test says `Script::new().reply("hi").then().echo()` instead of
//! writing the JSON by hand; [`agent`] and [`spawn_step`] for the agent spec and a spawn step.
//! JSON only: the script driver's own parser (in the drivers crate) stays the judge of it.

use serde_json::{json, Value};

/// A script, built turn by turn: steps go into the current turn, [`Script::then`] starts the
/// next one, [`Script::after`] says what every later turn does.
#[derive(Debug, Clone, Default)]
pub struct Script {
    turns: Vec<Vec<Value>>,
    after: Option<Value>,
}

impl Script {
    /// A script with no turns yet (the first step opens the first turn).
    pub fn new() -> Script {
        Script::default()
    }

    /// Appends any step (`{"do": ...}`) to the current turn.
    pub fn step(mut self, step: Value) -> Script {
        match self.turns.last_mut() {
            Some(turn) => turn.push(step),
            None => self.turns.push(vec![step]),
        }
        self
    }

    /// `{"do": "reply", "content": text}`.
    pub fn reply(self, text: &str) -> Script {
        self.step(json!({"do": "reply", "content": text}))
    }

    /// `{"do": "report", "content": content}`.
    pub fn report(self, content: &str) -> Script {
        self.step(json!({"do": "report", "content": content}))
    }

    /// `{"do": "sleep", "ms": ms}`.
    pub fn sleep_ms(self, ms: u64) -> Script {
        self.step(json!({"do": "sleep", "ms": ms}))
    }

    /// `{"do": "echo"}`: replies with the turn's input.
    pub fn echo(self) -> Script {
        self.step(json!({"do": "echo"}))
    }

    /// A spawn step ([`spawn_step`]) of a child running `child`.
    pub fn spawn(self, shape: &str, node: &str, prompt: &str, child: Script) -> Script {
        self.step(spawn_step(shape, node, prompt, child.json()))
    }

    /// Starts the next turn.
    pub fn then(mut self) -> Script {
        self.turns.push(Vec::new());
        self
    }

    /// What every turn after the scripted ones does (say `{"do": "echo"}`).
    pub fn after(mut self, step: Value) -> Script {
        self.after = Some(step);
        self
    }

    /// Every turn after the scripted ones echoes its input.
    pub fn after_echo(self) -> Script {
        self.after(json!({"do": "echo"}))
    }

    /// The script's JSON.
    pub fn json(&self) -> Value {
        let mut script = json!({"turns": self.turns});
        if let Some(after) = &self.after {
            script["after"] = after.clone();
        }
        script
    }

    /// The script's JSON text (what `lineage spawn --script` takes).
    pub fn text(&self) -> String {
        self.json().to_string()
    }

    /// The agent spec running this script ([`agent`]).
    pub fn agent(&self) -> Value {
        agent(self.json())
    }
}

/// A scripted agent spec (`{"driver":"script","script":...}`).
pub fn agent(script: Value) -> Value {
    json!({"driver": "script", "script": script})
}

/// A spawn step: a child of `shape` on `node`, given `prompt`, running `script`.
pub fn spawn_step(shape: &str, node: &str, prompt: &str, script: Value) -> Value {
    json!({"do": "spawn", "shape": shape, "node": node, "prompt": prompt,
        "agent": agent(script)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_json_written_by_hand() {
        let built = Script::new()
            .reply("started")
            .sleep_ms(5)
            .then()
            .report("r")
            .echo()
            .after_echo()
            .json();
        let by_hand = json!({"turns": [
            [{"do": "reply", "content": "started"}, {"do": "sleep", "ms": 5}],
            [{"do": "report", "content": "r"}, {"do": "echo"}]
        ], "after": {"do": "echo"}});
        assert_eq!(built, by_hand);
    }

    #[test]
    fn a_script_with_no_turns_and_a_spawn_step() {
        assert_eq!(
            Script::new().after_echo().json(),
            json!({"turns": [], "after": {"do": "echo"}})
        );
        let child = Script::new().reply("done");
        assert_eq!(
            Script::new()
                .spawn("one_shot", "node-2", "go", child.clone())
                .json(),
            json!({"turns": [[spawn_step("one_shot", "node-2", "go", child.json())]]})
        );
    }
}
