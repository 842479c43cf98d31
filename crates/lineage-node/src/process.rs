//! The node process's own figures for `/metrics` (`process_*`, the names Prometheus client
//! libraries use), read from Linux's `/proc/self` at each scrape. Elsewhere, or when a file
//! cannot be read, the families are left out rather than shown as 0.

/// One reading of the process.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProcessFigures {
    /// User and system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// Clock ticks per second of `/proc`'s times (`_SC_CLK_TCK`, 100 on every Linux port).
const TICKS_PER_SECOND: f64 = 100.0;
/// Page size of `statm` (4 KiB on the x86-64 and arm64 kernels this runs on).
const PAGE_BYTES: u64 = 4096;

impl ProcessFigures {
    /// Reads `/proc/self` (and `/proc/stat` for the boot time); `None` where there is none.
    pub fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        Self::parse(&stat, &statm, &boot, &limits, open_fds)
    }

    /// The figures from the texts of `/proc/self/stat`, `/proc/self/statm`, `/proc/stat` and
    /// `/proc/self/limits`. Pure; `None` when one is not what Linux writes.
    pub fn parse(stat: &str, statm: &str, boot: &str, limits: &str, open_fds: u64) -> Option<Self> {
        // The command name (field 2) is in parentheses and may hold spaces: count fields from
        // the last `)`. After it, field 3 (state) is index 0, so field n is index n - 3.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        let (utime, stime, start_ticks) = (field(14)?, field(15)?, field(22)?);
        let mut statm = statm.split_whitespace().map(|v| v.parse::<u64>().ok());
        let virtual_pages = statm.next()??;
        let resident_pages = statm.next()??;
        let btime = boot
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse::<u64>()
            .ok()?;
        let max_fds = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse::<u64>().ok());
        Some(ProcessFigures {
            cpu_seconds: (utime + stime) as f64 / TICKS_PER_SECOND,
            resident_bytes: resident_pages * PAGE_BYTES,
            virtual_bytes: virtual_pages * PAGE_BYTES,
            open_fds,
            max_fds,
            start_time_seconds: btime as f64 + start_ticks as f64 / TICKS_PER_SECOND,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_texts_are_read_and_a_name_with_spaces_is_skipped() {
        let stat = "4242 (lineage node) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 12 0 123400 1000000 2000";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        let got = ProcessFigures::parse(
            stat,
            "2500 1000 300 1 0 400 0\n",
            "cpu 1 2 3\nbtime 1700000000\n",
            limits,
            17,
        )
        .unwrap();
        assert_eq!(got.cpu_seconds, 3.0);
        assert_eq!(got.resident_bytes, 1000 * 4096);
        assert_eq!(got.virtual_bytes, 2500 * 4096);
        assert_eq!((got.open_fds, got.max_fds), (17, Some(1024)));
        assert_eq!(got.start_time_seconds, 1_700_000_000.0 + 1234.0);
        assert_eq!(ProcessFigures::parse("garbage", "", "", "", 0), None);
    }

    #[test]
    fn this_process_can_be_read() {
        if cfg!(target_os = "linux") {
            let me = ProcessFigures::read().expect("/proc/self");
            assert!(me.resident_bytes > 0 && me.open_fds > 0 && me.start_time_seconds > 1e9);
        }
    }
}
