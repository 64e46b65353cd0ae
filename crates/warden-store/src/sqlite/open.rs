//! Opening one SQLite file that other processes may be opening, migrating or
//! writing at the same instant: desktop clients start one stdio gateway per
//! window, often together, and they share the ledger through the file.
//!
//! Every lock another process holds is waited for, up to [`LOCK_WAIT`]: by
//! SQLite's busy handler where it applies, and by trying again where SQLite
//! answers `SQLITE_BUSY` without waiting (switching the journal to WAL, a lock
//! upgrade it would otherwise deadlock on). Creating and migrating the schema
//! happen in one `BEGIN IMMEDIATE` transaction that reads the version under the
//! write lock, so several processes doing it at once apply each step once.
//! Past the bound, the error names the file and, where the system says, the
//! process holding it.

use super::MIGRATIONS;
use crate::StoreError;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a lock held by another process is waited for before giving up.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Pause between two tries when SQLite answered busy without waiting itself.
const RETRY_PAUSE: Duration = Duration::from_millis(5);

/// Sets the connection up (lock waits, WAL, sync mode) and brings the schema
/// up to date. `path` names the file in errors (`None`: in memory).
pub(super) fn prepare(conn: &mut Connection, path: Option<&Path>) -> Result<(), StoreError> {
    conn.busy_timeout(LOCK_WAIT)?;
    let deadline = Instant::now() + LOCK_WAIT;
    // WAL: readers never block the writer; NORMAL sync is durable across process crashes.
    retry_busy(path, deadline, || {
        conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
    })?;
    conn.execute_batch("PRAGMA synchronous = NORMAL;")?;
    retry_busy(path, deadline, || migrate(conn))?
}

/// Creates the schema or migrates it, once, whoever else is doing it now.
fn migrate(conn: &mut Connection) -> rusqlite::Result<Result<(), StoreError>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);")?;
    let version: i64 = tx
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    if version as usize > MIGRATIONS.len() {
        return Ok(Err(StoreError::Unavailable(format!(
            "the database has schema version {version}, newer than this mcp-warden knows ({}); upgrade mcp-warden",
            MIGRATIONS.len()
        ))));
    }
    for sql in MIGRATIONS.iter().skip(version as usize) {
        tx.execute_batch(sql)?;
    }
    if version as usize != MIGRATIONS.len() {
        tx.execute("DELETE FROM schema_version", [])?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            [MIGRATIONS.len() as i64],
        )?;
    }
    tx.commit()?;
    Ok(Ok(()))
}

/// Runs `op` until it is not refused for a lock another connection holds, or
/// `deadline` passes; then the error says which file stayed locked and by whom.
pub(crate) fn retry_busy<T>(
    path: Option<&Path>,
    deadline: Instant,
    mut op: impl FnMut() -> rusqlite::Result<T>,
) -> Result<T, StoreError> {
    loop {
        match op() {
            Err(e) if is_busy(&e) && Instant::now() < deadline => std::thread::sleep(RETRY_PAUSE),
            Err(e) if is_busy(&e) => return Err(stayed_locked(path)),
            other => return other.map_err(StoreError::from),
        }
    }
}

/// `SQLITE_BUSY` or `SQLITE_LOCKED`: another connection holds what is needed.
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// The error for a file that stayed locked past [`LOCK_WAIT`].
pub(crate) fn stayed_locked(path: Option<&Path>) -> StoreError {
    let Some(path) = path else {
        return StoreError::Unavailable("the database stayed locked".into());
    };
    let holder = lock_holder(path)
        .map(|(pid, name)| format!("process {pid} ({name})"))
        .unwrap_or_else(|| "another process".into());
    StoreError::Unavailable(format!(
        "the SQLite file {} stayed locked for {} s: {holder} holds its write lock. \
         Wait for it to finish, stop it, or give this gateway a file of its own ([store] url)",
        path.display(),
        LOCK_WAIT.as_secs()
    ))
}

/// The process holding a write lock on the database file or its WAL index, as
/// `/proc/locks` tells (Linux); `None` where that cannot be told.
fn lock_holder(path: &Path) -> Option<(u32, String)> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let mut shm = path.as_os_str().to_owned();
    shm.push("-shm");
    let files: Vec<String> = [path, Path::new(&shm)]
        .iter()
        .filter_map(|p| file_id(p))
        .collect();
    let own = std::process::id();
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        let (kind, pid, id) = (f.get(3)?, f.get(4)?.parse::<u32>().ok()?, f.get(5)?);
        if *kind != "WRITE" || pid == own || !files.iter().any(|x| x == id) {
            return None;
        }
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        Some((pid, name.trim().to_owned()))
    })
}

/// A file's id as `/proc/locks` writes it: `major:minor:inode`, the device in hex.
#[cfg(unix)]
fn file_id(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let dev = meta.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    Some(format!("{major:02x}:{minor:02x}:{}", meta.ino()))
}

#[cfg(not(unix))]
fn file_id(_path: &Path) -> Option<String> {
    None
}
