//! `lineage bench` and `lineage chaos`: the lab. Benchmarks and the fault harness are a program
//! of their own, `lineage-lab` (`crates/lineage-lab`), so that the shipped `lineage` does not
//! carry them (nor the test kit they start clusters with); the image has no lab. `lineage
//! bench ARGS` and `lineage chaos ARGS` run `lineage-lab` with the same command line, as
//! `git foo` runs `git-foo`: the lab takes the same global flags and verbs.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use lineage_bus::control::{ControlError, ErrorCode};

/// The lab program's name.
pub const LAB: &str = "lineage-lab";

/// Where the lab program is: beside this program, else on `PATH`.
pub fn lab_program() -> Result<PathBuf, ControlError> {
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(LAB))
        .filter(|p| p.is_file());
    let on_path = || {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(LAB))
                .find(|p| p.is_file())
        })
    };
    beside.or_else(on_path).ok_or_else(|| {
        ControlError::new(
            ErrorCode::BadRequest,
            format!(
                "benchmarks and the fault harness are in the lab program {LAB}, which is neither beside this lineage nor on PATH; build it with `cargo build --release -p lineage-lab` (the image does not ship it)"
            ),
        )
    })
}

/// Replaces this process with the lab program, given this process's arguments; returns only
/// on failure, with the exit code (the error printed as every verb's).
pub fn forward() -> i32 {
    let json = std::env::args().any(|a| a == "--json");
    let error = match lab_program() {
        Ok(lab) => {
            let e = std::process::Command::new(&lab)
                .args(std::env::args_os().skip(1))
                .exec();
            ControlError::new(
                ErrorCode::Internal,
                format!("cannot run {}: {e}", lab.display()),
            )
        }
        Err(e) => e,
    };
    crate::output::fail(json, &error)
}
