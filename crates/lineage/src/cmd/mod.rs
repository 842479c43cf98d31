//! The CLI verbs, one module each (mini-redis `cmd/`): its clap arguments and its `run`. Verbs
//! that talk to the cluster go through [`ControlClient`] (the control service) or the registry
//! client; none of them compiles against the host. They share [`crate::client`] and
//! [`crate::global`]; the dispatch is [`crate::run`].
//!
//! | module | verb |
//! |---|---|
//! | [`node`] | `lineage node`: run one node |
//! | [`spawn`] | `lineage spawn` |
//! | [`send`] | `lineage send` (followup) |
//! | [`interrupt`] | `lineage interrupt` |
//! | [`tree`] | `lineage tree` |
//! | [`show`] | `lineage show`: one session at a glance (issue 37) |
//! | [`logs`] | `lineage logs [-f]`: a session's transcript from its event log (issue 37) |
//! | [`ls`] | `lineage ls`: list and search sessions (Q4) |
//! | [`drain`] | `lineage drain` |
//! | [`watch`] | `lineage watch` |
//! | [`status`] | `lineage status` |
//! | [`agents`] | `lineage agents` |
//! | [`mcp`] | `lineage mcp`: a hosted agent's stdio MCP server (a bridge to its node's tools socket) |
//! | [`config`] | `lineage config show` |
//! | [`docs`] | `lineage docs cli-reference` (hidden): the CLI reference, `docs/cli.md`, generated |
//! | [`script`] | `lineage script schema` / `check`: the scripted agent's language |
//! | [`ui`] | `lineage ui`: the cluster in a browser (issue 36) |
//! | [`workspace`] | `lineage workspace diff` / `pull` / `apply`: a session's files and changes (issue 39) |

pub mod agents;
pub mod config;
pub mod docs;
pub mod drain;
pub mod interrupt;
pub mod logs;
pub mod ls;
pub mod mcp;
pub mod node;
pub mod script;
pub mod send;
pub mod show;
pub mod spawn;
pub mod status;
pub mod tree;
pub mod ui;
pub mod watch;
pub mod workspace;
