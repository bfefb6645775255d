//! Helpers for tests of troupe in any crate (feature `test-support`; never in a build of troupe
//! itself).

use std::io;
use std::path::{Path, PathBuf};

/// Where a test world of the boundary goes: a folder commands inside the boundary may not
/// write. `target_tmpdir` (the build's own temporary folder, a test's `CARGO_TARGET_TMPDIR`),
/// unless it lies under one of the temporary folders the boundary leaves writable (as when CI
/// clones the checkout into `/tmp`); then `troupe-test-worlds` under `$HOME`, created if need be.
pub fn unwritable_base(target_tmpdir: &Path) -> io::Result<PathBuf> {
    let real = |p: PathBuf| p.canonicalize().unwrap_or(p);
    // The same folders a confined command may write (see `ConfinePolicy::new`).
    let temps: Vec<PathBuf> = std::iter::once(std::env::temp_dir())
        .chain(crate::builtin::confine::TEMP_DIRS.iter().map(PathBuf::from))
        .map(real)
        .collect();
    let target_real = real(target_tmpdir.to_path_buf());
    if !temps.iter().any(|t| target_real.starts_with(t)) {
        return Ok(target_tmpdir.to_path_buf());
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} lies in a temporary folder commands may write, and HOME is not set to put the test worlds elsewhere; set HOME or CARGO_TARGET_DIR",
                target_tmpdir.display()
            ),
        )
    })?;
    let base = PathBuf::from(home).join("troupe-test-worlds");
    std::fs::create_dir_all(&base)?;
    Ok(base)
}
