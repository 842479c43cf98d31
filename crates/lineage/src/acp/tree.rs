//! What an ACP client is shown of its sessions' trees (F1, F2): a pure state machine.
//!
//! The front door feeds it what the bus carries ([`Observed`]: births and ends of children,
//! reports and settlements, turn output) and gets back what to send ([`Emit`]), as data. Rules:
//! - Only sessions of a tree this connection opened are shown: the roots (its ACP sessions) and
//!   every descendant, learned from `subagent/start` (a child's start names its parent, so a
//!   tree is learned top down). Traffic of a session whose parent is not known yet waits
//!   (bounded), so a child is announced before any of its own traffic is shown.
//! - A root's output is its agent's text; a descendant is shown only to a client that declared
//!   the `subagents` capability: announced (title from its label, cancel allowed) before its
//!   first traffic, `running` while a turn runs, `idle` between turns and once it ended; its
//!   own text and the reports it sends appear under its own session id.
//! - A child running on a node whose lease lapsed ([`Observed::Lapsed`]) is shown `unknown`
//!   (with why), once: ACP's state for an agent that cannot tell whether the work goes on; its
//!   resume elsewhere (a new `subagent/start`) shows it `running` again, the end of its cut
//!   turn `idle` (A4).
//! - A child's state is sent when it changes, never twice in a row: its announcement says
//!   `running`, so the first turn's start sends nothing more; a new run of a child already
//!   known (a resume) is a state change, not a second announcement.
//! - The usage an agent reported in a turn (context tokens and window, cumulative cost) is sent
//!   at the turn's end as its session's `usage_update`, when it gave its window's size (ACP
//!   requires it).
//! - A turn whose text was not streamed (a driver that does not stream) shows its recorded reply
//!   once, at its end.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use lineage_core::ids::{NodeId, SessionId};
use lineage_core::messages::StopReason;
use lineage_core::output::{TurnEndOutcome, TurnOutput};

/// Events a session's parent is not known for yet, at most (the oldest are dropped).
pub const MAX_WAITING: usize = 10_000;

/// What the front door saw on the bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// `subagent/start` of `child` under `parent`.
    Start {
        /// The parent.
        parent: SessionId,
        /// The child.
        child: SessionId,
        /// Its label, when it has one (the registry's descriptor).
        label: Option<String>,
        /// Its agent's provider (`script`, `acp`, a profile).
        provider: String,
        /// The node this run of it is hosted on.
        node: Option<NodeId>,
    },
    /// `subagent/end` of `child`.
    End {
        /// The parent.
        parent: SessionId,
        /// The child.
        child: SessionId,
        /// Why its run ended.
        stop_reason: StopReason,
    },
    /// A report from `child` to `parent` (M1).
    Report {
        /// The parent.
        parent: SessionId,
        /// The child.
        child: SessionId,
        /// The report's seq (per child).
        seq: u64,
        /// The text.
        content: String,
    },
    /// A session's turn output.
    Output(TurnOutput),
    /// The nodes whose lease has lapsed now (read from the registry every second): a child
    /// running on one cannot be known to run any more until it is resumed elsewhere.
    Lapsed {
        /// The nodes.
        nodes: BTreeSet<NodeId>,
    },
}

/// A subagent's state as ACP shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// A turn runs.
    Running,
    /// Between turns, or ended.
    Idle,
    /// Its node stopped answering in a turn: whether it still runs cannot be known until it is
    /// resumed elsewhere (ACP's `unknown`, A4).
    Unknown,
}

/// What to send to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Emit {
    /// `subagent_update` on `parent`: announce `child` (title, cancel capability, state).
    Announce {
        /// The parent's session (where the update goes).
        parent: SessionId,
        /// The child.
        child: SessionId,
        /// Its title.
        title: String,
        /// Its state.
        state: ChildState,
    },
    /// `subagent_update` on `parent`: `child`'s state changed (`note` describes why, when it
    /// ended).
    State {
        /// The parent's session.
        parent: SessionId,
        /// The child.
        child: SessionId,
        /// Its state.
        state: ChildState,
        /// A description update (how its run ended).
        note: Option<String>,
    },
    /// `agent_message_chunk` on `session`.
    Text {
        /// The session.
        session: SessionId,
        /// The text.
        text: String,
    },
    /// `session_message` on `child`: a report it sent to `parent`.
    Report {
        /// The reporting child.
        child: SessionId,
        /// Its parent.
        parent: SessionId,
        /// A message id unique in the child's transcript.
        message_id: String,
        /// The text.
        text: String,
    },
    /// `usage_update` on `session`: its context and cost, as its agent last reported.
    Usage {
        /// The session.
        session: SessionId,
        /// Tokens in its context.
        used: u64,
        /// Its context window.
        size: u64,
        /// Its cumulative cost: millionths of the currency, and the currency.
        cost: Option<(u64, String)>,
    },
    /// A root's turn began (the front door matches the request ids to its prompts).
    RootTurnStarted {
        /// The root.
        root: SessionId,
        /// The turn.
        turn: u64,
        /// The followups it took.
        request_ids: Vec<String>,
    },
    /// A root's turn ended (its text was emitted before).
    RootTurnEnded {
        /// The root.
        root: SessionId,
        /// The turn.
        turn: u64,
        /// How.
        outcome: TurnEndOutcome,
        /// Why it failed, when it did.
        error: Option<String>,
    },
}

/// The trees of one ACP connection.
#[derive(Debug, Default)]
pub struct FrontTree {
    subagents: bool,
    roots: BTreeSet<SessionId>,
    /// Every known descendant, with its parent.
    parents: BTreeMap<SessionId, SessionId>,
    /// Sessions whose current turn streamed text (so its recorded reply is not shown again).
    streamed: BTreeSet<(SessionId, u64)>,
    /// Events of sessions whose parent is not known yet, oldest first.
    waiting: VecDeque<Observed>,
    /// The state last sent for each descendant shown.
    shown: BTreeMap<SessionId, ChildState>,
    /// The node each shown descendant's current run is hosted on, when known.
    placed: BTreeMap<SessionId, NodeId>,
}

impl FrontTree {
    /// Trees for a client that did (`subagents`) or did not declare the subagents capability.
    pub fn new(subagents: bool) -> Self {
        FrontTree {
            subagents,
            ..FrontTree::default()
        }
    }

    /// Whether descendants are shown.
    pub fn shows_subagents(&self) -> bool {
        self.subagents
    }

    /// A root this connection opened (or loaded).
    pub fn add_root(&mut self, root: SessionId) {
        self.roots.insert(root);
    }

    /// A descendant known from the registry (a loaded tree), announced now.
    pub fn add_known(
        &mut self,
        parent: SessionId,
        child: SessionId,
        title: String,
        state: ChildState,
    ) -> Vec<Emit> {
        if self.parents.contains_key(&child) || !self.knows(&parent) {
            return Vec::new();
        }
        self.parents.insert(child.clone(), parent.clone());
        let mut out = Vec::new();
        if self.subagents {
            self.shown.insert(child.clone(), state);
            out.push(Emit::Announce {
                parent,
                child,
                title,
                state,
            });
        }
        self.release_waiting(&mut out);
        out
    }

    /// Where a known descendant runs (a loaded tree's, from its registry record).
    pub fn place(&mut self, child: SessionId, node: NodeId) {
        if self.parents.contains_key(&child) {
            self.placed.insert(child, node);
        }
    }

    /// Whether `session` is a root of this connection.
    pub fn is_root(&self, session: &SessionId) -> bool {
        self.roots.contains(session)
    }

    /// The root of a known descendant's tree.
    pub fn root_of(&self, session: &SessionId) -> Option<SessionId> {
        let mut at = session;
        // Bounded by the number of known sessions (a parent chain cannot be longer).
        for _ in 0..=self.parents.len() {
            if self.roots.contains(at) {
                return (at != session).then(|| at.clone());
            }
            at = self.parents.get(at)?;
        }
        None
    }

    /// A root closed (drained): its tree is forgotten.
    pub fn remove_root(&mut self, root: &SessionId) {
        self.roots.remove(root);
        let gone: Vec<SessionId> = self
            .parents
            .keys()
            .filter(|s| self.root_of(s).is_none())
            .cloned()
            .collect();
        for s in gone {
            self.parents.remove(&s);
            self.shown.remove(&s);
            self.placed.remove(&s);
        }
    }

    /// Whether `session` is a root or a known descendant.
    pub fn knows(&self, session: &SessionId) -> bool {
        self.roots.contains(session) || self.parents.contains_key(session)
    }

    /// Feeds one observed event; returns what to send, in order.
    pub fn observe(&mut self, event: Observed) -> Vec<Emit> {
        let mut out = Vec::new();
        if self.apply(event, &mut out) {
            self.release_waiting(&mut out);
        }
        out
    }

    /// Applies what waited and can be shown now, until nothing more can.
    fn release_waiting(&mut self, out: &mut Vec<Emit>) {
        loop {
            let mut progressed = false;
            let waiting = std::mem::take(&mut self.waiting);
            for event in waiting {
                if self.ready(&event) {
                    progressed |= self.apply(event, out);
                } else {
                    self.waiting.push_back(event);
                }
            }
            if !progressed {
                return;
            }
        }
    }

    /// Whether the session an event is about (or its parent, for a start) is known.
    fn ready(&self, event: &Observed) -> bool {
        match event {
            Observed::Start { parent, .. } => self.knows(parent),
            Observed::End { child, .. } | Observed::Report { child, .. } => self.knows(child),
            Observed::Output(o) => self.knows(o.session()),
            Observed::Lapsed { .. } => true,
        }
    }

    /// Applies `event` or, when it is not ready, keeps it; true when a new session became known.
    fn apply(&mut self, event: Observed, out: &mut Vec<Emit>) -> bool {
        if !self.ready(&event) {
            if self.roots.is_empty() {
                return false;
            }
            if self.waiting.len() >= MAX_WAITING {
                self.waiting.pop_front();
            }
            self.waiting.push_back(event);
            return false;
        }
        match event {
            Observed::Start {
                parent,
                child,
                label,
                provider,
                node,
            } => {
                let new = !self.parents.contains_key(&child);
                self.parents.insert(child.clone(), parent.clone());
                match node {
                    Some(node) => self.placed.insert(child.clone(), node),
                    None => self.placed.remove(&child),
                };
                match (self.subagents, new) {
                    (false, _) => {}
                    (true, true) => {
                        let title =
                            label.unwrap_or_else(|| format!("{provider} {}", short(&child)));
                        self.shown.insert(child.clone(), ChildState::Running);
                        out.push(Emit::Announce {
                            parent,
                            child,
                            title,
                            state: ChildState::Running,
                        });
                    }
                    (true, false) => {
                        self.state(parent, child, ChildState::Running, None, out);
                    }
                }
                new
            }
            Observed::Lapsed { nodes } => {
                let lost: Vec<(SessionId, SessionId, NodeId)> = self
                    .placed
                    .iter()
                    .filter(|(child, node)| {
                        nodes.contains(*node)
                            && self.shown.get(*child) == Some(&ChildState::Running)
                    })
                    .filter_map(|(child, node)| {
                        Some((
                            self.parents.get(child)?.clone(),
                            child.clone(),
                            node.clone(),
                        ))
                    })
                    .collect();
                for (parent, child, node) in lost {
                    let note = format!(
                        "its node {node} stopped answering; lineage resumes it on another node at its next message"
                    );
                    self.state(parent, child, ChildState::Unknown, Some(note), out);
                }
                false
            }
            Observed::End {
                parent,
                child,
                stop_reason,
            } => {
                if self.subagents {
                    let note = Some(format!("ended: {}", stop_reason.as_str()));
                    self.state(parent, child, ChildState::Idle, note, out);
                }
                false
            }
            Observed::Report {
                parent,
                child,
                seq,
                content,
            } => {
                if self.subagents {
                    out.push(Emit::Report {
                        child,
                        parent,
                        message_id: format!("report-{seq}"),
                        text: content,
                    });
                }
                false
            }
            Observed::Output(output) => {
                self.output(output, out);
                false
            }
        }
    }

    fn output(&mut self, output: TurnOutput, out: &mut Vec<Emit>) {
        let session = output.session().clone();
        let root = self.roots.contains(&session);
        if !root && !self.subagents {
            return;
        }
        let parent = self.parents.get(&session).cloned();
        match output {
            TurnOutput::TurnStart {
                turn, request_ids, ..
            } => match (root, parent) {
                (true, _) => out.push(Emit::RootTurnStarted {
                    root: session,
                    turn,
                    request_ids,
                }),
                (false, Some(parent)) => {
                    self.state(parent, session, ChildState::Running, None, out)
                }
                (false, None) => {}
            },
            TurnOutput::Chunk { turn, text, .. } => {
                self.streamed.insert((session.clone(), turn));
                out.push(Emit::Text { session, text });
            }
            TurnOutput::TurnEnd {
                turn,
                outcome,
                error,
                reply,
                usage,
                ..
            } => {
                let streamed = self.streamed.remove(&(session.clone(), turn));
                if let (false, Some(text)) = (streamed, reply) {
                    if !text.is_empty() {
                        out.push(Emit::Text {
                            session: session.clone(),
                            text,
                        });
                    }
                }
                if let Some((usage, size)) = usage.and_then(|u| Some((u.clone(), u.size_tokens?))) {
                    let cost = match (usage.cost_micros, usage.currency) {
                        (Some(micros), Some(currency)) => Some((micros, currency)),
                        _ => None,
                    };
                    out.push(Emit::Usage {
                        session: session.clone(),
                        used: usage.used_tokens,
                        size,
                        cost,
                    });
                }
                match (root, parent) {
                    (true, _) => out.push(Emit::RootTurnEnded {
                        root: session,
                        turn,
                        outcome,
                        error,
                    }),
                    (false, Some(parent)) => {
                        self.state(parent, session, ChildState::Idle, None, out)
                    }
                    (false, None) => {}
                }
            }
        }
    }

    /// A child's state update, sent when it changes what was shown or carries a note.
    fn state(
        &mut self,
        parent: SessionId,
        child: SessionId,
        state: ChildState,
        note: Option<String>,
        out: &mut Vec<Emit>,
    ) {
        if note.is_none() && self.shown.get(&child) == Some(&state) {
            return;
        }
        self.shown.insert(child.clone(), state);
        out.push(Emit::State {
            parent,
            child,
            state,
            note,
        });
    }
}

/// The first 8 characters of an id, for a fallback title.
fn short(id: &SessionId) -> String {
    id.as_str().chars().take(8).collect()
}

#[cfg(test)]
mod tests;
