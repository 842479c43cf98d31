//! What one member's store has spent on its state (issue 13, scale): how long the last load at
//! open took, the last snapshot built and installed, their size. Written by the storage shell
//! (which times its own work), read by the node's `/metrics` page and `lineage bench scale`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counters of one member's store, shared between its state machine and its owner.
#[derive(Debug, Default)]
pub struct StoreStats {
    commands_since_snapshot: AtomicU64,
    load_us: AtomicU64,
    load_bytes: AtomicU64,
    built_total: AtomicU64,
    build_us: AtomicU64,
    build_bytes: AtomicU64,
    installed_total: AtomicU64,
    install_us: AtomicU64,
    install_bytes: AtomicU64,
    request_results: AtomicU64,
}

/// A copy of [`StoreStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreFigures {
    /// Commands applied since the state was last captured for a snapshot (or since start).
    pub commands_since_snapshot: u64,
    /// Time to read the last snapshot at open and rebuild the state (and its indexes) from it.
    pub load: Duration,
    /// Size of the snapshot read at open (0: none).
    pub load_bytes: u64,
    /// Snapshots built since the member started.
    pub built_total: u64,
    /// Time the last snapshot build took: encoding the state and writing it durably.
    pub build: Duration,
    /// Size of the last snapshot built.
    pub build_bytes: u64,
    /// Snapshots received from a leader and installed since the member started.
    pub installed_total: u64,
    /// Time the last install took: decoding, writing it durably and swapping the state.
    pub install: Duration,
    /// Size of the last snapshot installed.
    pub install_bytes: u64,
    /// Accepted commands' results the state keeps for retries by request id (G2, Q5), after
    /// the last apply, load or install.
    pub request_results: u64,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl StoreStats {
    /// Counts `n` commands applied.
    pub(crate) fn applied(&self, n: u64) {
        self.commands_since_snapshot.fetch_add(n, Ordering::Relaxed);
    }

    /// The state was captured for a snapshot: what was applied so far is in it.
    pub(crate) fn captured(&self) {
        self.commands_since_snapshot.store(0, Ordering::Relaxed);
    }

    /// Records the load at open.
    pub(crate) fn loaded(&self, took: Duration, bytes: u64) {
        self.load_us.store(micros(took), Ordering::Relaxed);
        self.load_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Records how many results the state keeps for retries now.
    pub(crate) fn keeps_results(&self, n: usize) {
        self.request_results
            .store(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Records a snapshot built.
    pub(crate) fn built(&self, took: Duration, bytes: u64) {
        self.build_us.store(micros(took), Ordering::Relaxed);
        self.build_bytes.store(bytes, Ordering::Relaxed);
        self.built_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a snapshot installed.
    pub(crate) fn installed(&self, took: Duration, bytes: u64) {
        self.install_us.store(micros(took), Ordering::Relaxed);
        self.install_bytes.store(bytes, Ordering::Relaxed);
        self.installed_total.fetch_add(1, Ordering::Relaxed);
    }

    /// The figures now.
    pub fn figures(&self) -> StoreFigures {
        let us = |a: &AtomicU64| Duration::from_micros(a.load(Ordering::Relaxed));
        StoreFigures {
            commands_since_snapshot: self.commands_since_snapshot.load(Ordering::Relaxed),
            load: us(&self.load_us),
            load_bytes: self.load_bytes.load(Ordering::Relaxed),
            built_total: self.built_total.load(Ordering::Relaxed),
            build: us(&self.build_us),
            build_bytes: self.build_bytes.load(Ordering::Relaxed),
            installed_total: self.installed_total.load(Ordering::Relaxed),
            install: us(&self.install_us),
            install_bytes: self.install_bytes.load(Ordering::Relaxed),
            request_results: self.request_results.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_keep_the_last_build_and_install_and_count_them() {
        let s = StoreStats::default();
        assert_eq!(s.figures(), StoreFigures::default());
        s.applied(3);
        s.applied(4);
        assert_eq!(s.figures().commands_since_snapshot, 7);
        s.captured();
        assert_eq!(s.figures().commands_since_snapshot, 0);
        s.loaded(Duration::from_millis(7), 10);
        s.built(Duration::from_millis(3), 100);
        s.built(Duration::from_millis(5), 200);
        s.installed(Duration::from_millis(9), 300);
        s.keeps_results(12);
        let f = s.figures();
        assert_eq!(f.request_results, 12);
        assert_eq!((f.load, f.load_bytes), (Duration::from_millis(7), 10));
        assert_eq!(
            (f.built_total, f.build, f.build_bytes),
            (2, Duration::from_millis(5), 200)
        );
        assert_eq!(
            (f.installed_total, f.install, f.install_bytes),
            (1, Duration::from_millis(9), 300)
        );
    }
}
