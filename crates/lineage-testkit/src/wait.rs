//! [`wait_for`] and its async twin [`wait_for_async`]: the one way a test waits for something
//! to become true.
//!
//! Both poll a probe until it is ready or `within` has passed, then panic with one line: what
//! was awaited, how long, and the last thing the probe saw. A probe returns a [`Probe`]:
//! - `bool`: ready when `true`;
//! - `Option<T>`: ready with `T` when `Some`;
//! - `Result<T, E>`: ready with `T` when `Ok`; an `Err(e)` is the observation the timeout
//!   message shows (`E: Display`, formatted only then, so it may be costly to render).
//!
//! [`poll`] is [`wait_for`] without the panic. The pause between polls starts at [`FIRST_PAUSE`] and doubles up to [`MAX_PAUSE`]: a fast
//! condition is seen at once, a slow one does not hammer the cluster (a probe that runs the CLI
//! starts a process each time).

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// The first pause between two polls.
pub const FIRST_PAUSE: Duration = Duration::from_millis(10);

/// The longest pause between two polls.
pub const MAX_PAUSE: Duration = Duration::from_millis(100);

/// What a probe of [`wait_for`] returns: ready with a value, or not yet (with what it saw).
pub trait Probe {
    /// The value [`wait_for`] returns once the probe is ready.
    type Ready;
    /// What the probe saw when not ready, for the timeout message.
    type Seen: Display;
    /// `Ok` when ready; `Err(Some(seen))` or `Err(None)` when not yet.
    fn check(self) -> Result<Self::Ready, Option<Self::Seen>>;
}

impl Probe for bool {
    type Ready = ();
    type Seen = Infallible;
    fn check(self) -> Result<(), Option<Infallible>> {
        if self {
            Ok(())
        } else {
            Err(None)
        }
    }
}

impl<T> Probe for Option<T> {
    type Ready = T;
    type Seen = Infallible;
    fn check(self) -> Result<T, Option<Infallible>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Probe for Result<T, E> {
    type Ready = T;
    type Seen = E;
    fn check(self) -> Result<T, Option<E>> {
        self.map_err(Some)
    }
}

/// Polls `probe` until it is ready and returns its value; panics after `within` with
/// "timed out after {within} waiting for {what}" and the last observation.
pub fn wait_for<P: Probe>(
    within: Duration,
    what: impl Display,
    probe: impl FnMut() -> P,
) -> P::Ready {
    poll(within, probe).unwrap_or_else(|seen| timed_out(within, &what, seen))
}

/// [`wait_for`] without the panic: `Err` with the last observation when `within` passed (for
/// a wait whose timeout is an expected outcome, say a process that may keep running).
pub fn poll<P: Probe>(
    within: Duration,
    mut probe: impl FnMut() -> P,
) -> Result<P::Ready, Option<P::Seen>> {
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        match probe().check() {
            Ok(ready) => return Ok(ready),
            Err(seen) if started.elapsed() >= within => return Err(seen),
            Err(_) => {}
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// [`wait_for`] for async tests: the probe returns a future, the pause is a tokio sleep (the
/// runtime keeps running the code under test meanwhile). Same semantics and message.
pub async fn wait_for_async<P: Probe, F: Future<Output = P>>(
    within: Duration,
    what: impl Display,
    probe: impl FnMut() -> F,
) -> P::Ready {
    match poll_async(within, probe).await {
        Ok(ready) => ready,
        Err(seen) => timed_out(within, &what, seen),
    }
}

/// [`poll`] for async tests: [`wait_for_async`] without the panic.
pub async fn poll_async<P: Probe, F: Future<Output = P>>(
    within: Duration,
    mut probe: impl FnMut() -> F,
) -> Result<P::Ready, Option<P::Seen>> {
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        match probe().await.check() {
            Ok(ready) => return Ok(ready),
            Err(seen) if started.elapsed() >= within => return Err(seen),
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// The one timeout message of [`wait_for`] and [`wait_for_async`].
fn timed_out(within: Duration, what: &dyn Display, seen: Option<impl Display>) -> ! {
    match seen {
        Some(seen) => panic!("timed out after {within:?} waiting for {what}; last seen: {seen}"),
        None => panic!("timed out after {within:?} waiting for {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_ready_value() {
        let mut n = 0;
        let got = wait_for(Duration::from_secs(5), "the third poll", || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(got, 3);
    }

    #[test]
    fn times_out_with_what_how_long_and_the_last_observation() {
        let caught = std::panic::catch_unwind(|| {
            let mut n = 0;
            wait_for(
                Duration::from_millis(50),
                "never",
                || -> Result<(), String> {
                    n += 1;
                    Err(format!("poll {n}"))
                },
            )
        });
        let message = *caught
            .expect_err("it must time out")
            .downcast::<String>()
            .expect("a formatted panic message");
        assert!(
            message.starts_with("timed out after 50ms waiting for never; last seen: poll "),
            "{message}"
        );
    }

    #[test]
    fn the_async_twin_has_the_same_message() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let caught = std::panic::catch_unwind(move || {
            rt.block_on(wait_for_async(
                Duration::from_millis(30),
                "a flag",
                || async { false },
            ))
        });
        let message = *caught
            .expect_err("it must time out")
            .downcast::<String>()
            .expect("a formatted panic message");
        assert_eq!(message, "timed out after 30ms waiting for a flag");
    }
}
