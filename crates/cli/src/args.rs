//! Option values that several commands parse alike (comma-separated lists,
//! durations in seconds), and writing the output files that options name.

use std::path::Path;
use std::time::Duration;

/// Parses a comma-separated `--what` list; empty items are skipped, an empty list is an error.
pub(crate) fn list<T>(
    what: &str,
    s: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let v = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| parse(p.trim()))
        .collect::<Result<Vec<T>, String>>()?;
    if v.is_empty() {
        return Err(format!("--{what} is empty"));
    }
    Ok(v)
}

/// A positive number of seconds (at most 1e6) for `--what`.
pub(crate) fn seconds(what: &str, v: f64) -> Result<Duration, String> {
    if !v.is_finite() || v <= 0.0 || v > 1e6 {
        return Err(format!(
            "--{what} {v}: must be more than 0 and at most 1e6 seconds"
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Writes `text` to `path`; the error names the file.
pub(crate) fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
