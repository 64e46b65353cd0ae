//! WAL checkpoints off the commit path. SQLite's auto-checkpoint runs on the
//! connection that committed, inside its COMMIT, every 1,000 WAL pages (an audit
//! batch of 23 records writes about 22): it copies the pages into the database
//! file and syncs both. On this host's disk that made 178 of 2,000 batch
//! COMMITs take over 2 ms (up to 21 ms; the mean COMMIT 0.86 ms), and every
//! sync call of such a batch waited for it (issue 28; `cargo test --release -p
//! warden-store bench_sqlite -- --ignored --nocapture`). So a thread of the
//! store's own, on a connection of its own, runs PASSIVE checkpoints shortly
//! after writes: they copy what is committed without taking the write lock, so
//! commits go on meanwhile. The store's connection checkpoints only as a
//! backstop ([`BACKSTOP_PAGES`]). Durability is unchanged: a commit is in the
//! WAL when it returns (synchronous = NORMAL, as before), checkpointed or not.

use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::time::Duration;

/// WAL pages past which the committing connection checkpoints itself (SQLite's
/// own default is 1,000). Under steady writes a checkpoint on another
/// connection never catches up with the last commit, and only one that did
/// lets the next writer start the WAL over: this one does, after its commit,
/// copying only what the checkpointer left (a few pages) and syncing. Without
/// it the WAL would grow without bound; with it the file stays under about
/// 32 MiB.
pub(super) const BACKSTOP_PAGES: u32 = 8_192;

/// How long the checkpointer lets writes gather after the first one it hears of.
const GATHER: Duration = Duration::from_millis(100);

/// Tells the checkpointer that something was written; its thread ends when the
/// last clone of the store is dropped.
#[derive(Clone)]
pub(super) struct Checkpointer {
    nudge: SyncSender<()>,
}

impl Checkpointer {
    /// Starts the checkpointer of the database file at `path`.
    pub(super) fn start(path: &Path) -> std::io::Result<Checkpointer> {
        let (nudge, nudged) = sync_channel(1);
        let path = path.to_owned();
        std::thread::Builder::new()
            .name("warden-sqlite-checkpoint".into())
            .spawn(move || run(&path, nudged))?;
        Ok(Checkpointer { nudge })
    }

    /// After a statement: a checkpoint is due soon (one pending covers many).
    pub(super) fn nudge(&self) {
        let _ = self.nudge.try_send(());
    }
}

fn run(path: &Path, nudged: Receiver<()>) {
    let mut conn: Option<Connection> = None;
    while nudged.recv().is_ok() {
        std::thread::sleep(GATHER);
        if conn.is_none() {
            // Never made here: a file gone stays gone.
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            conn = Connection::open_with_flags(path, flags)
                .inspect_err(|e| {
                    tracing::debug!("checkpointer: cannot open {}: {e}", path.display())
                })
                .ok();
        }
        if let Some(c) = &conn {
            if let Err(e) = checkpoint(c) {
                tracing::debug!("checkpointer: {}: {e}", path.display());
            }
        }
    }
}

/// A PASSIVE checkpoint: copies what is committed without waiting for any
/// lock; what is left goes with the next one.
fn checkpoint(conn: &Connection) -> rusqlite::Result<()> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
}
