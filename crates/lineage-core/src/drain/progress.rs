//! When a drain's live progress is worth a message (X1): [`ProgressThrottle`].

/// Least time between two `disposing` progress messages of one wave, in ms.
pub const PROGRESS_INTERVAL_MS: u64 = 100;

/// Decides when a wave's progress is worth a message, so a wave of 10,000 disposals sends a
/// handful, not 10,000: the first call of a wave says yes, later ones only once
/// [`PROGRESS_INTERVAL_MS`] has passed since the last yes, and never for `done >= total` (the
/// wave's end has its own message). Pure: the caller passes `now_ms`. One per wave.
#[derive(Debug, Clone, Default)]
pub struct ProgressThrottle {
    last_ms: Option<u64>,
}

impl ProgressThrottle {
    /// A throttle for a wave that has sent nothing yet.
    pub fn new() -> Self {
        ProgressThrottle::default()
    }

    /// True when a message for `done` of `total` should be sent at `now_ms` (and counts it as
    /// sent).
    pub fn should_send(&mut self, now_ms: u64, done: u64, total: u64) -> bool {
        if done >= total {
            return false;
        }
        match self.last_ms {
            Some(last) if now_ms.saturating_sub(last) < PROGRESS_INTERVAL_MS => false,
            Some(_) | None => {
                self.last_ms = Some(now_ms);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x1_progress_throttle_sends_first_then_at_most_every_interval_never_the_end() {
        let t0 = 1_000_000u64;
        let ms = |n: u64| t0 + n;
        let mut t = ProgressThrottle::new();
        assert!(t.should_send(ms(0), 0, 1000), "the wave's start");
        assert!(!t.should_send(ms(1), 1, 1000));
        assert!(!t.should_send(ms(99), 50, 1000));
        assert!(t.should_send(ms(100), 60, 1000));
        assert!(!t.should_send(ms(150), 70, 1000));
        assert!(t.should_send(ms(250), 80, 1000));
        // The end has its own message, whenever it comes.
        assert!(!t.should_send(ms(10_000), 1000, 1000));
        // A time before the last send (a clock stepped back): no panic and no send.
        assert!(!t.should_send(t0, 90, 1000));
        // An empty wave sends nothing but its end.
        assert!(!ProgressThrottle::new().should_send(t0, 0, 0));
    }

    #[test]
    fn x1_progress_throttle_bounds_messages_of_a_large_wave() {
        // 10,000 disposals acknowledged over 2 s (one every 0.2 ms): the start plus one per
        // 100 ms at most.
        let mut t = ProgressThrottle::new();
        let sent = (0..10_000u64)
            .filter(|i| t.should_send(i / 5, *i, 10_000))
            .count();
        assert!((20..=21).contains(&sent), "{sent}");
    }
}
