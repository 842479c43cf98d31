//! Time and fresh ids, injected (the host logic never reads `SystemTime` directly).
//!
//! [`Clock`] gives unix milliseconds; [`SystemClock`] is the real one, [`ManualClock`] a test
//! clock that only moves when told. [`IdMint`] makes fresh UUIDv7 session, run and request ids
//! from a clock and a per-process random seed.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lineage_core::ids::{RequestId, RunId, SessionId};

/// A source of wall-clock time in unix milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told (tests).
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock showing `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock {
            now: AtomicU64::new(start_ms),
        }
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// Mints fresh UUIDv7 ids: 48 bits of clock time, then random bits (per-process seed plus a
/// counter, so two ids minted in the same millisecond differ).
#[derive(Clone)]
pub struct IdMint {
    clock: Arc<dyn Clock>,
    seed: RandomState,
    counter: Arc<AtomicU64>,
}

impl std::fmt::Debug for IdMint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdMint").finish_non_exhaustive()
    }
}

impl IdMint {
    /// A mint reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        IdMint {
            clock,
            seed: RandomState::new(),
            counter: Arc::new(AtomicU64::new(0)),
        }
    }

    fn random(&self) -> u64 {
        let mut h = self.seed.build_hasher();
        h.write_u64(self.counter.fetch_add(1, Ordering::Relaxed));
        h.finish()
    }

    /// UUIDv7 text.
    pub fn uuid_v7(&self) -> String {
        let ms = self.clock.now_ms() & 0xFFFF_FFFF_FFFF;
        let a = self.random();
        let b = self.random();
        let rand_a = a & 0x0FFF;
        let rand_b = b & 0x3FFF_FFFF_FFFF_FFFF;
        let hi: u64 = (ms << 16) | 0x7000 | rand_a;
        let lo: u64 = 0x8000_0000_0000_0000 | rand_b;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            hi >> 32,
            (hi >> 16) & 0xFFFF,
            hi & 0xFFFF,
            lo >> 48,
            lo & 0xFFFF_FFFF_FFFF
        )
    }

    /// Mints until `parse` accepts (UUIDv7 text always parses, so this is one round).
    fn mint<T, E>(&self, parse: impl Fn(&str) -> Result<T, E>) -> T {
        loop {
            if let Ok(id) = parse(&self.uuid_v7()) {
                return id;
            }
        }
    }

    /// A fresh session id.
    pub fn session(&self) -> SessionId {
        self.mint(SessionId::parse)
    }

    /// A fresh run id.
    pub fn run(&self) -> RunId {
        self.mint(RunId::parse)
    }

    /// A fresh request id (registry idempotency key).
    pub fn request(&self) -> RequestId {
        self.mint(RequestId::parse)
    }

    /// The clock this mint reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_are_uuid_v7_and_distinct() {
        let mint = IdMint::new(Arc::new(ManualClock::new(1_700_000_000_000)));
        let a = mint.session();
        let b = mint.session();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 36);
        assert_eq!(&a.as_str()[14..15], "7");
        assert!(a.as_str().starts_with("018bcfe5-6800"), "{a}");
        let _ = mint.run();
        let _ = mint.request();
    }
}
