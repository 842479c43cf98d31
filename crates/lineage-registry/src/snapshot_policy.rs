//! When a member builds a snapshot (issue 13, scale): after a number of applied *commands*
//! that grows with the state, not after a fixed number of log entries.
//!
//! A snapshot costs time in proportion to the state (every record is encoded and written); a
//! restart replays the commands applied since the last one. A fixed count of log entries gets
//! both wrong at scale: a leader batches concurrent writes (about 60 commands an entry under
//! load), so 5,000 entries can be 300,000 commands to replay, while a quiet registry of a million
//! sessions would re-encode all of them every 5,000 writes. Building after
//! `max(min, records / RECORDS_PER_COMMAND)` commands bounds both: the encoding work is at most
//! [`RECORDS_PER_COMMAND`] records per command applied (amortized), and a restart replays at most
//! a quarter of the state's size in commands (or `min`).

/// Records encoded per applied command, amortized, at most.
pub const RECORDS_PER_COMMAND: u64 = 4;

/// Whether a snapshot is due: `commands_since` applied since the last one (or since start),
/// `records` in the state, `min_commands` configured.
pub fn snapshot_due(commands_since: u64, records: u64, min_commands: u64) -> bool {
    commands_since > 0 && commands_since >= min_commands.max(records / RECORDS_PER_COMMAND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_state_snapshots_after_the_configured_count() {
        assert!(!snapshot_due(4_999, 100, 5_000));
        assert!(snapshot_due(5_000, 100, 5_000));
        assert!(
            !snapshot_due(0, 0, 0),
            "nothing applied: nothing to snapshot"
        );
    }

    #[test]
    fn a_large_state_snapshots_after_a_quarter_of_its_size() {
        assert!(!snapshot_due(5_000, 1_000_000, 5_000));
        assert!(!snapshot_due(249_999, 1_000_000, 5_000));
        assert!(snapshot_due(250_000, 1_000_000, 5_000));
    }
}
