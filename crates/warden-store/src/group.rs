//! Group commit for the audit trail: records of concurrent calls are written
//! together, one transaction (SQLite) or one multi-row INSERT (PostgreSQL) per
//! batch, instead of one round trip each.
//!
//! One task gathers. It takes the first record that comes, waits for a free
//! lane, then takes everything that queued meanwhile, up to [`MAX_BATCH`]: the
//! busier the store, the bigger its batches, and an idle store writes a record
//! at once (a batch window of 1 ms, waited before the lane, cost SQLite 0.17
//! and PostgreSQL 0.10 of the no-store rate on the HTTP bench, issue 28). As
//! many batches are written at once as the store has lanes
//! ([`Store::audit_lanes`]: one on SQLite, a few on PostgreSQL, each on its own
//! connection), but a batch that finds a commit running first waits for a
//! commit to end, or for [`SPREAD`], whichever comes first: a fast commit is
//! followed by one batch of everything that queued behind it, and only slow
//! ones (a disk that flushes slowly) have others written beside them. With
//! [`Durability::Sync`] the caller waits for its batch's commit (no answer leaves
//! before its record is stored); with [`Durability::Async`] it only queues, and
//! a full queue drops the record (the caller counts and logs it).
//!
//! SQLite's one lane is a thread of its own that gathers, links, writes and
//! answers: each batch written from a task cost a spawned task, a hop to
//! Tokio's blocking pool and a wake-up back, for a connection that blocks
//! anyway (issue 28).

use crate::{AuditRecord, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};

/// The most records one batch holds.
pub const MAX_BATCH: usize = 256;
/// How many records may wait for the writer.
pub const QUEUE: usize = 8192;
/// How long at most a batch that finds a commit running waits for a commit to
/// end before it takes another lane. Where the disk flushes fast, a commit
/// costs PostgreSQL processor time more than it waits, and batches written side
/// by side each hold fewer records for the same cost per commit; where it
/// flushes slowly, lanes still open beside the commits that wait (docs/fleet.md,
/// issue 28). One tick of Tokio's timer, which rounds a deadline up to its next
/// tick: the wait lasts 1 to 2 ms on an idle host, more on a loaded one.
pub const SPREAD: Duration = Duration::from_millis(1);

/// Whether an answer waits for its audit record to be committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// The caller waits for its batch's commit.
    #[default]
    Sync,
    /// The record is queued and the caller goes on.
    Async,
}

/// What becomes of queued records whose batch the store refused: the caller's
/// retry path (nobody waits for them).
pub type Unstored = Arc<dyn Fn(Vec<AuditRecord>, StoreError) + Send + Sync>;

/// A record the store did not take, given back with why (`None`: the writer
/// task itself is gone, and the record with it).
#[derive(Debug)]
pub struct Unwritten(pub StoreError, pub Option<Box<AuditRecord>>);

enum Job {
    Record(Box<AuditRecord>, Waiter),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

/// The handle calls write their records through; clones share one writer.
#[derive(Clone)]
pub struct AuditWriter {
    jobs: mpsc::Sender<Job>,
    /// SQLite's writer thread (declared after `jobs`, so dropped after it).
    _thread: Option<Arc<Joined>>,
}

/// How long the last handle's drop waits for the writer thread to end.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Waits for the writer thread when the last handle goes: the queue is closed
/// by then, so the thread writes what it holds and ends, and with it the file's
/// connection closes (checkpointing its WAL) before the process can exit. The
/// wait is bounded: a thread still writing after [`CLOSE_WAIT`] (a file locked
/// by another process, or a chain head held by a retry on the runtime thread
/// that is dropping this) is left to end with the process, its WAL kept for
/// the next open.
/// (A thread is finished once its closure has returned, its captures, the
/// store among them, dropped.)
struct Joined(Option<std::thread::JoinHandle<()>>);

impl Drop for Joined {
    fn drop(&mut self) {
        let Some(thread) = self.0.take() else { return };
        let deadline = std::time::Instant::now() + CLOSE_WAIT;
        while !thread.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            tracing::warn!("the audit writer was still writing when the gateway stopped; its last batch may be unwritten");
        }
    }
}

impl AuditWriter {
    /// Starts the writer task (inside a Tokio runtime). `unstored` receives the
    /// records queued without a waiter ([`AuditWriter::offer`]) whose batch failed.
    pub fn start(store: Store, unstored: Unstored) -> AuditWriter {
        let (jobs, rx) = mpsc::channel(QUEUE);
        let thread = match store {
            Store::Sqlite(sqlite) => on_thread(sqlite, rx, unstored),
            store => {
                tokio::spawn(run(store, rx, unstored, SPREAD));
                None
            }
        };
        let thread = thread.map(|t| Arc::new(Joined(Some(t))));
        AuditWriter {
            jobs,
            _thread: thread,
        }
    }

    /// [`AuditWriter::start`] on a store of several lanes, with `spread` for
    /// [`SPREAD`].
    #[cfg(test)]
    pub(crate) fn start_spread(store: Store, spread: Duration) -> AuditWriter {
        let (jobs, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(store, rx, Arc::new(|_, _| {}), spread));
        AuditWriter {
            jobs,
            _thread: None,
        }
    }

    /// Queues `record` and waits until its batch is committed; a record not
    /// written comes back with why.
    pub async fn append(&self, record: AuditRecord) -> Result<(), Unwritten> {
        let (done, committed) = oneshot::channel();
        let gone = || StoreError::Unavailable("the audit writer stopped".into());
        if let Err(e) = self
            .jobs
            .send(Job::Record(Box::new(record), Some(done)))
            .await
        {
            let Job::Record(record, _) = e.0 else {
                unreachable!("a record was sent")
            };
            return Err(Unwritten(gone(), Some(record)));
        }
        committed
            .await
            .unwrap_or_else(|_| Err(Unwritten(gone(), None)))
    }

    /// Queues `record` without waiting; `Err` gives it back when the queue is
    /// full (or the writer stopped).
    pub fn offer(&self, record: AuditRecord) -> Result<(), Box<AuditRecord>> {
        self.jobs
            .try_send(Job::Record(Box::new(record), None))
            .map_err(|e| match e.into_inner() {
                Job::Record(r, _) => r,
                Job::Flush(_) => unreachable!("only records are offered"),
            })
    }

    /// Waits until every record queued before this call is written (or failed).
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.jobs.send(Job::Flush(done)).await.is_ok() {
            let _ = flushed.await;
        }
    }

    /// Records waiting for the writer now.
    pub fn queued(&self) -> usize {
        QUEUE - self.jobs.capacity()
    }
}

/// The writer's loop (PostgreSQL's lanes; SQLite's one lane when it has no
/// thread): a batch that finds a commit running waits for a commit to end, or
/// for `spread`, before it takes a lane.
async fn run(store: Store, mut rx: mpsc::Receiver<Job>, unstored: Unstored, spread: Duration) {
    let lanes = store.audit_lanes();
    let free = Arc::new(Semaphore::new(lanes));
    let ended = Arc::new(Notify::new());
    while let Some(first) = rx.recv().await {
        // Listening before looking, so a commit that ends in between is seen.
        let one_ends = ended.notified();
        tokio::pin!(one_ends);
        one_ends.as_mut().enable();
        if free.available_permits() < lanes {
            let _ = tokio::time::timeout(spread, one_ends).await;
        }
        // While the wait lasts, and while every lane is busy, records queue
        // behind this one and join its batch.
        let Ok(lane) = free.clone().acquire_owned().await else {
            return;
        };
        let (flushes, jobs) = gather(first, &mut rx);
        let (store, unstored, ended) = (store.clone(), unstored.clone(), ended.clone());
        tokio::spawn(async move {
            let (records, waiters) = split(jobs);
            let written = store.record_batch(&records).await;
            answer(records, waiters, written, &unstored);
            drop(lane);
            ended.notify_waiters();
        });
        if !flushes.is_empty() {
            let all = free.acquire_many(lanes as u32).await;
            answer_flushes(flushes);
            drop(all);
        }
    }
}

/// Starts SQLite's writer thread: [`run`]'s loop with one lane, each batch
/// written where it was gathered. Without a thread (the system would not give
/// one), the writer is a task as for PostgreSQL.
fn on_thread(
    sqlite: crate::sqlite::Sqlite,
    rx: mpsc::Receiver<Job>,
    unstored: Unstored,
) -> Option<std::thread::JoinHandle<()>> {
    // The thread enters the runtime, for whatever `unstored` spawns.
    let runtime = tokio::runtime::Handle::current();
    let (store, writer) = (Store::Sqlite(sqlite.clone()), unstored.clone());
    // `rx` goes over once the thread runs, so a failed spawn still has it.
    let (tx, handoff) = std::sync::mpsc::channel::<mpsc::Receiver<Job>>();
    let spawned = std::thread::Builder::new()
        .name("warden-audit".into())
        .spawn(move || {
            let _entered = runtime.enter();
            let Ok(mut rx) = handoff.recv() else { return };
            while let Some(first) = rx.blocking_recv() {
                let (flushes, jobs) = gather(first, &mut rx);
                // A panic in the write fails the batch as an error (see
                // `record_batch_blocking`); one anywhere else drops the batch's
                // waiters (each counts its record lost), not the writer.
                let n = jobs.len();
                let batch = std::panic::AssertUnwindSafe(|| {
                    let (records, waiters) = split(jobs);
                    let written = sqlite.record_batch_blocking(&records);
                    answer(records, waiters, written, &writer);
                });
                if std::panic::catch_unwind(batch).is_err() {
                    tracing::error!(
                        "writing a batch of {n} audit record(s) panicked; they are lost"
                    );
                }
                answer_flushes(flushes);
            }
        });
    match spawned {
        Ok(thread) => {
            let _ = tx.send(rx);
            Some(thread)
        }
        Err(e) => {
            tracing::warn!("no thread for the audit writer ({e}); writing from a task");
            tokio::spawn(run(store, rx, unstored, SPREAD));
            None
        }
    }
}

/// `first` and whatever queued behind it, up to [`MAX_BATCH`]: the flushes
/// among them, then the records.
fn gather(first: Job, rx: &mut mpsc::Receiver<Job>) -> (Vec<Job>, Vec<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    batch.push(first);
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    batch.into_iter().partition(|j| matches!(j, Job::Flush(_)))
}

/// Answers flushes: every batch before them is written.
fn answer_flushes(flushes: Vec<Job>) {
    for job in flushes {
        if let Job::Flush(done) = job {
            let _ = done.send(());
        }
    }
}

type Waiter = Option<oneshot::Sender<Result<(), Unwritten>>>;

/// The records of `jobs`, and who waits for each.
fn split(jobs: Vec<Job>) -> (Vec<AuditRecord>, Vec<Waiter>) {
    let mut records = Vec::with_capacity(jobs.len());
    let mut waiters = Vec::with_capacity(jobs.len());
    for job in jobs {
        if let Job::Record(r, done) = job {
            records.push(*r);
            waiters.push(done);
        }
    }
    (records, waiters)
}

/// Tells each waiter how its batch went; a record whose batch failed goes back
/// to its waiter, or to `unstored`.
fn answer(
    records: Vec<AuditRecord>,
    waiters: Vec<Waiter>,
    written: Result<(), StoreError>,
    unstored: &Unstored,
) {
    match written {
        Ok(()) => {
            for done in waiters.into_iter().flatten() {
                let _ = done.send(Ok(()));
            }
        }
        Err(e) => {
            let mut orphans = Vec::new();
            for (r, done) in records.into_iter().zip(waiters) {
                match done {
                    Some(done) => {
                        let _ = done.send(Err(Unwritten(e.clone(), Some(Box::new(r)))));
                    }
                    None => orphans.push(r),
                }
            }
            if !orphans.is_empty() {
                unstored(orphans, e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AuditFilter;
    use std::sync::Mutex;

    fn record(n: usize) -> AuditRecord {
        serde_json::from_value(serde_json::json!({
            "time": "2026-12-03T00:00:00.000Z", "session": "stdio", "caller": "alice",
            "tool": format!("t{n}"), "upstream": null, "arguments": {}, "reason": null,
            "unknown_keys": [], "unknown_mode": null, "decision": "allowed",
            "outcome": "ok", "duration_ms": 1.0, "idempotency_key": null, "replayed": false
        }))
        .unwrap()
    }

    fn nowhere() -> Unstored {
        Arc::new(|_, _| {})
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_are_each_committed_when_they_return() {
        let store = Store::in_memory().unwrap();
        let writer = AuditWriter::start(store.clone(), nowhere());
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let (w, s) = (writer.clone(), store.clone());
                tokio::spawn(async move {
                    w.append(record(i)).await.unwrap();
                    // Committed: a reader finds it at once.
                    let tool = Some(format!("t{i}"));
                    let filter = AuditFilter {
                        tool,
                        ..Default::default()
                    };
                    s.query(filter).await.unwrap().len()
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), 1);
        }
        let report = store.verify_chains().await.unwrap();
        assert_eq!(report.verdicts.len(), 1);
        assert_eq!(report.verdicts[0].records, 200);
        assert_eq!(report.verdicts[0].broken, None);
    }

    #[tokio::test]
    async fn offered_records_are_written_by_a_flush() {
        let store = Store::in_memory().unwrap();
        let writer = AuditWriter::start(store.clone(), nowhere());
        for i in 0..50 {
            writer.offer(record(i)).unwrap();
        }
        writer.flush().await;
        assert_eq!(writer.queued(), 0);
        let all = store.query(AuditFilter::default()).await.unwrap();
        let tools: Vec<_> = all.iter().map(|r| r.tool.clone()).collect();
        assert_eq!(tools, (0..50).map(|i| format!("t{i}")).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_full_queue_gives_the_record_back() {
        // A writer that cannot write: the test holds its chain's head, so the
        // writer's thread waits on its first batch while the queue fills.
        let store = Store::in_memory().unwrap();
        let held = store.lanes().hold_first().await;
        let writer = AuditWriter::start(store.clone(), nowhere());
        let mut offered = 0;
        let back = loop {
            assert!(offered <= QUEUE + MAX_BATCH, "the queue never filled");
            match writer.offer(record(offered)) {
                Ok(()) => offered += 1,
                Err(back) => break back,
            }
        };
        assert_eq!(back.tool, format!("t{offered}"));
        assert_eq!(writer.queued(), QUEUE);
        // Let go, and every record the queue took is written.
        drop(held);
        writer.flush().await;
        let report = store.verify_chains().await.unwrap();
        assert_eq!(report.verdicts[0].records, offered as u64);
    }

    #[tokio::test]
    async fn the_last_handle_goes_even_while_the_writer_waits_on_this_thread() {
        // The test's one runtime thread holds the chain's head (as a retry
        // task can), so the writer's thread cannot end its batch: dropping the
        // last handle waits for it a while, then lets it be, and returns. It
        // used to wait for good.
        let store = Store::in_memory().unwrap();
        let held = store.lanes().hold_first().await;
        let writer = AuditWriter::start(store.clone(), nowhere());
        writer.offer(record(1)).unwrap();
        drop(writer);
        drop(held);
    }

    #[tokio::test]
    async fn records_of_a_failed_batch_reach_the_waiter_or_the_retry_path() {
        // A trail whose table is gone: every batch fails.
        let store = Store::in_memory().unwrap();
        let Store::Sqlite(sqlite) = &store else {
            unreachable!()
        };
        sqlite
            .with(|c| c.execute_batch("DROP TABLE audit"))
            .await
            .unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let writer = AuditWriter::start(
            store,
            Arc::new(move |records, _| sink.lock().unwrap().extend(records)),
        );
        let back = writer.append(record(1)).await.unwrap_err();
        let tool = back.1.map(|r| r.tool);
        assert_eq!(
            tool.as_deref(),
            Some("t1"),
            "the record comes back to its waiter"
        );
        writer.offer(record(2)).unwrap();
        writer.flush().await;
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].tool, "t2");
    }
}
