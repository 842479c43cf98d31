//! `lineage-core`: the sans-IO heart of lineage.
//!
//! Every rule of the subagent-lineage design lives here as a pure function or a state machine
//! that takes inputs and returns actions as data. There is no tokio, no NATS, no clock and no
//! randomness: time and fresh ids are passed in. The host executes the actions; the registry's
//! state machine calls the same rules at apply time, so no node can bypass them.
//!
//! Module map (requirement ids from `shared/spec/requirements.md`):
//!
//! | module | what | ids |
//! |---|---|---|
//! | [`ids`] | `SessionId`, `RunId`, `NodeId`, `RequestId`: safe NATS subject tokens | N1 |
//! | [`depth`] | delegation depth, max depth validation, `SubagentDepthError` | D1–D4 |
//! | [`budget`] | budgets of tokens and cost per subtree, and the refusal once spent | Q3 |
//! | [`deadline`] | deadlines: a timeout to an absolute deadline, the subtrees the sweeper drains | Q2 |
//! | [`idle`] | idle roots: the idle TTL a top-level session is drained after, and when it is due | Q2 |
//! | [`fanout`] | fan-out caps: live children per parent, live descendants per tree | Q1 |
//! | [`limits`] | `BirthLimits`: the max depth, fan-out caps and budget a birth carries | D4, Q1, Q3 |
//! | [`header`] | the frozen `SessionHeader`, `child_session_meta` | L1–L4 |
//! | [`permission`] | how a hosted agent's permission request is answered; the harness mode a policy names | C2, C4 |
//! | [`policy`] | delegated policy snapshot and its log events | C2, C3 |
//! | [`composition`] | the child's creation-window composition | C1 |
//! | [`descriptor`] | `SubagentDescriptor`, `seed_descriptor_turn` | P1 |
//! | [`messages`] | versioned wire payloads: report, settlement, start/end | M1, M2, E1, N3 |
//! | [`output`] | a turn's output as it comes: `turn-start`, `chunk`, `turn-end` | F1 |
//! | [`lease`] | a node's own view of its lease: when it fences itself, when a renewal came too late | K1, R1 |
//! | [`retention`] | when a disposed session is purged; the tombstone of purged ids | Q5 |
//! | [`log`] | the append-only session event log | L1, P1, C3 |
//! | [`journal`] | the typed events a hosted agent writes to its log | X2, M1–M3, E1 |
//! | [`engine`] | one live agent's rules: accept, turns, restore, settle, as commands | X2, M1–M4, S1 |
//! | [`activation`] | the activation state machine running -> waiting -> settled | X2 |
//! | [`lifecycle`] | `SessionState` (starting, running, waiting, settled, disposed), shared with the registry; overdue births: `expire_births` | X2, S1, M2 |
//! | [`drain`] | the leaves-first drain planner | X1, H2 |
//! | [`resume`] | cold resume: what a record, this node and the log decide before and after the claim; a recent record only ever leads to a claim | K1 |
//! | [`routing`] | forward-once routing of a request to the node hosting its session; the owner of a hosted agent | R2, M3, M4 |
//! | [`authority`] | the interrupt authority check | M4, R3 |
//! | [`index`] | `index_subagent_descendants` | I1 |
//! | [`usage`] | usage hosted agents report, per session and summed per subtree | Q3 |
//! | [`workspace`] | which stored snapshot holds a session's files; the objects' names | C1, K1 |
//! | [`error`] | [`CoreError`], the crate's one error enum | |

#![deny(missing_docs)]

pub mod activation;
pub mod authority;
pub mod budget;
pub mod composition;
pub mod deadline;
pub mod depth;
pub mod descriptor;
pub mod drain;
pub mod engine;
pub mod error;
pub mod fanout;
pub mod header;
pub mod idle;
pub mod ids;
pub mod index;
pub mod journal;
pub mod lease;
pub mod lifecycle;
pub mod limits;
pub mod log;
pub mod messages;
pub mod output;
pub mod permission;
pub mod policy;
pub mod resume;
pub mod retention;
pub mod routing;
pub mod usage;
pub mod workspace;

pub use error::CoreError;
