//! Live drain progress on a terminal: what `lineage drain` writes to stderr as the node's
//! `DrainProgress` messages arrive (`lineage.<cluster>.drain.<id>.progress`).
//!
//! Pure: [`LiveBars`] turns messages into the text to write, [`render_wave_bar`] draws one
//! line. One line per wave, `wave  3 [#########.......]  412/1000`; the current wave's line is
//! redrawn in place (`\r`), a finished wave's line is ended with `\n` and kept.

use lineage_protocol::control::{DrainPhase, DrainProgress, DRAIN_PROGRESS_VERSION};

/// Width of a live bar, between the brackets.
pub const BAR_WIDTH: usize = 40;

/// One wave's line: `wave {wave:>2} [{'#' * filled}{'.' * rest}] {done}/{total}`, with `done`
/// right-aligned to the width of `total` so a redraw never gets shorter. `filled` is
/// `done * width / total`, rounded down (a bar is full only when the wave is); an empty wave
/// (`total` 0) is full; `done` past `total` counts as `total`.
pub fn render_wave_bar(wave: usize, done: u64, total: u64, width: usize) -> String {
    let done = done.min(total);
    let filled = if total == 0 {
        width
    } else {
        let f = u128::from(done) * width as u128 / u128::from(total);
        usize::try_from(f).unwrap_or(width).min(width)
    };
    let digits = total.to_string().len();
    format!(
        "wave {wave:>2} [{}{}] {done:>digits$}/{total}",
        "#".repeat(filled),
        ".".repeat(width - filled)
    )
}

/// The live lines of one drain: feed it each message ([`LiveBars::apply`]), write what it
/// returns, and at the end write [`LiveBars::finish`].
#[derive(Debug, Default)]
pub struct LiveBars {
    /// The wave whose line is open (drawn, not ended).
    open: Option<usize>,
    /// Waves below this are finished: later messages about them are stale and ignored.
    next: usize,
}

impl LiveBars {
    /// Nothing drawn yet.
    pub fn new() -> Self {
        LiveBars::default()
    }

    /// The text to write for one raw message (malformed or of another version: nothing).
    #[cfg(test)]
    pub fn apply_raw(&mut self, payload: &[u8]) -> String {
        self.apply_decoded(serde_json::from_slice(payload))
    }

    /// The text to write for one decoded message (one that did not decode: nothing).
    pub fn apply_decoded(&mut self, msg: Result<DrainProgress, serde_json::Error>) -> String {
        match msg {
            Ok(p) => self.apply(&p),
            Err(_) => String::new(),
        }
    }

    /// The text to write for one message.
    pub fn apply(&mut self, p: &DrainProgress) -> String {
        if p.v != DRAIN_PROGRESS_VERSION {
            return String::new();
        }
        if p.phase == DrainPhase::Planned {
            let mut out = self.finish();
            out.push_str(&format!(
                "draining {} sessions in {} waves\n",
                p.total, p.waves
            ));
            return out;
        }
        if p.wave < self.next {
            return String::new();
        }
        let mut out = String::new();
        // A wave whose end was lost: keep its last line and go on.
        if self.open.is_some_and(|w| w != p.wave) {
            out.push('\n');
        }
        out.push('\r');
        out.push_str(&render_wave_bar(p.wave, p.done, p.total, BAR_WIDTH));
        if p.phase == DrainPhase::WaveDone {
            out.push('\n');
            self.open = None;
            self.next = p.wave + 1;
        } else {
            self.open = Some(p.wave);
        }
        out
    }

    /// Ends an open line (the drain returned, or failed, mid-wave).
    pub fn finish(&mut self) -> String {
        match self.open.take() {
            Some(_) => "\n".to_owned(),
            None => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lineage_core::ids::DrainId;

    fn id() -> DrainId {
        DrainId::parse("d-1").unwrap()
    }

    #[test]
    fn x1_wave_bar_is_proportional_and_fixed_width() {
        assert_eq!(
            render_wave_bar(3, 412, 1000, 16),
            "wave  3 [######..........]  412/1000"
        );
        assert_eq!(render_wave_bar(0, 0, 9, 4), "wave  0 [....] 0/9");
        assert_eq!(render_wave_bar(0, 9, 9, 4), "wave  0 [####] 9/9");
        // Full only when done: 999 of 1000 is not a full bar.
        assert_eq!(
            render_wave_bar(12, 999, 1000, 10),
            "wave 12 [#########.]  999/1000"
        );
        assert_eq!(render_wave_bar(1, 0, 0, 3), "wave  1 [###] 0/0");
        assert_eq!(render_wave_bar(1, 7, 5, 5), "wave  1 [#####] 5/5");
        // Every redraw of a wave has the same length.
        let lens: Vec<usize> = (0..=1000)
            .map(|d| render_wave_bar(3, d, 1000, BAR_WIDTH).len())
            .collect();
        assert!(lens.windows(2).all(|w| w[0] == w[1]));
        // Huge counts do not overflow.
        assert!(render_wave_bar(0, u64::MAX - 1, u64::MAX, 8).contains("[#######.]"));
    }

    #[test]
    fn x1_live_bars_redraw_the_current_wave_and_keep_finished_ones() {
        let mut bars = LiveBars::new();
        let mut out = String::new();
        out += &bars.apply(&DrainProgress::planned(id(), vec![4, 2]));
        out += &bars.apply(&DrainProgress::disposing(id(), 0, 2, 0, 4));
        out += &bars.apply(&DrainProgress::disposing(id(), 0, 2, 2, 4));
        out += &bars.apply(&DrainProgress::wave_done(id(), 0, 2, 4));
        // Stale: wave 0 is finished.
        out += &bars.apply(&DrainProgress::disposing(id(), 0, 2, 3, 4));
        out += &bars.apply(&DrainProgress::disposing(id(), 1, 2, 0, 2));
        out += &bars.finish();
        let bar = |w, d, t| render_wave_bar(w, d, t, BAR_WIDTH);
        assert_eq!(
            out,
            format!(
                "draining 6 sessions in 2 waves\n\r{}\r{}\r{}\n\r{}\n",
                bar(0, 0, 4),
                bar(0, 2, 4),
                bar(0, 4, 4),
                bar(1, 0, 2)
            )
        );
        // Nothing open: finish writes nothing.
        assert_eq!(bars.finish(), "");
    }

    #[test]
    fn x1_live_bars_survive_lost_and_foreign_messages() {
        let mut bars = LiveBars::new();
        let a = bars.apply(&DrainProgress::disposing(id(), 0, 3, 1, 4));
        // Wave 0's end was lost: its line is ended when wave 1 shows up.
        let b = bars.apply(&DrainProgress::disposing(id(), 1, 3, 0, 2));
        assert_eq!(a, format!("\r{}", render_wave_bar(0, 1, 4, BAR_WIDTH)));
        assert_eq!(b, format!("\n\r{}", render_wave_bar(1, 0, 2, BAR_WIDTH)));
        assert_eq!(bars.apply_raw(b"not json"), "");
        assert_eq!(
            bars.apply_raw(
                br#"{"v":2,"drain":"d-1","phase":"disposing","wave":1,"waves":3,"done":1,"total":2}"#
            ),
            ""
        );
        assert_eq!(
            bars.apply_raw(
                br#"{"v":1,"drain":"d-1","phase":"wave_done","wave":1,"waves":3,"done":2,"total":2}"#
            ),
            format!("\r{}\n", render_wave_bar(1, 2, 2, BAR_WIDTH))
        );
        assert_eq!(bars.finish(), "");
    }
}
