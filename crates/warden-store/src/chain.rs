//! Tamper evidence for the audit trail: each record carries the hash of the one
//! before it in its replica's chain, and [`Verifier`] walks every chain and
//! names the first broken link.
//!
//! A replica's chain is named after its store's owner id (one per gateway
//! process, see [`crate::Store::owner`]). On PostgreSQL a replica writes several
//! batches at once, each on its own connection: each of those lanes is a chain
//! of its own (`<owner>`, `<owner>-1` …), written one batch at a time, so
//! that no batch's fate decides another's link. A write that fails (the store
//! was down, or PostgreSQL lost the connection without saying whether the rows
//! were committed) ends the chain where it was sure: the next record opens a
//! new segment, `<owner>.1`, `.2` …, at its own genesis, so a failure never
//! reads as tampering and a replica never forks its own chain.
//!
//! A record's hash is SHA-256 over the previous hash, the chain, its sequence
//! number, its time and every stored column (the record's JSON whole). An
//! edited, deleted or reordered row breaks the chain at that row; rows dropped
//! from a chain's end, or a whole chain, leave no break: the gateway logs each
//! chain's head when it stops, for whoever wants to hold it elsewhere.

use crate::{AuditRecord, StoreError};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Mutex;

/// The hash a chain's first record follows.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One record as stored, with its place in its chain.
#[derive(Debug, Clone, PartialEq)]
pub struct Linked {
    pub chain: String,
    pub seq: i64,
    pub prev: String,
    pub hash: String,
    /// Milliseconds since the epoch, as the `time_ms` column holds it.
    pub time_ms: i64,
    pub caller: Option<String>,
    pub tool: String,
    pub outcome: String,
    /// The record's JSON, as the `record` column holds it.
    pub json: String,
    /// Copies of a few of the record's fields in columns of their own, so the
    /// console counts them without reading the JSON; outside the hash (the JSON
    /// holds them), and left default when rows are read back to be verified.
    pub facts: Facts,
}

/// The record's fields the console charts, as the columns hold them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub decision: String,
    pub upstream: Option<String>,
    pub duration_ms: f64,
    /// The guard findings as JSON, when there are any.
    pub findings: Option<String>,
}

impl Facts {
    fn of(r: &AuditRecord) -> Facts {
        Facts {
            decision: r.decision.clone(),
            upstream: r.upstream.clone(),
            duration_ms: r.duration_ms,
            findings: (!r.findings.is_empty())
                .then(|| serde_json::to_string(&r.findings).ok())
                .flatten(),
        }
    }
}

impl Linked {
    /// The hash of this row's content after `self.prev`.
    pub fn expected_hash(&self) -> String {
        let mut h = Sha256::new();
        // Each field is length-prefixed, so no two contents hash alike by moving a
        // boundary; `caller` tells absent from empty.
        let caller = self.caller.as_deref();
        for part in [
            Some(self.prev.as_str()),
            Some(self.chain.as_str()),
            Some(&self.seq.to_string()),
            Some(&self.time_ms.to_string()),
            caller,
            Some(self.tool.as_str()),
            Some(self.outcome.as_str()),
            Some(self.json.as_str()),
        ] {
            match part {
                Some(p) => {
                    h.update((p.len() as u64).to_be_bytes());
                    h.update(p.as_bytes());
                }
                None => h.update(u64::MAX.to_be_bytes()),
            }
        }
        hex(&h.finalize())
    }
}

/// Lower-case hex, as the hash columns hold it (one `format!` per byte cost
/// half of a record's hashing).
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Where one lane's chain stands: the next record follows `hash` at `seq`.
pub(crate) struct ChainHead {
    /// The owner id, and the lane's number after it past the first.
    name: String,
    segment: u32,
    seq: i64,
    hash: String,
}

impl ChainHead {
    pub(crate) fn new(owner: &str, lane: usize) -> ChainHead {
        ChainHead {
            name: match lane {
                0 => owner.to_owned(),
                n => format!("{owner}-{n}"),
            },
            segment: 0,
            seq: 0,
            hash: GENESIS.to_owned(),
        }
    }

    /// The chain the next record joins.
    pub(crate) fn id(&self) -> String {
        match self.segment {
            0 => self.name.clone(),
            n => format!("{}.{n}", self.name),
        }
    }

    /// The chain's id, its length and its last hash, for the log.
    pub(crate) fn describe(&self) -> (String, i64, String) {
        (self.id(), self.seq, self.hash.clone())
    }

    /// `records` linked after the head, stamped `time_ms`; the head is not moved.
    fn link(&self, records: &[AuditRecord], time_ms: i64) -> Result<Vec<Linked>, StoreError> {
        let chain = self.id();
        let mut prev = self.hash.clone();
        let mut out = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let json =
                serde_json::to_string(r).map_err(|e| StoreError::Unavailable(e.to_string()))?;
            let mut row = Linked {
                chain: chain.clone(),
                seq: self.seq + i as i64,
                prev,
                hash: String::new(),
                time_ms,
                caller: r.caller.clone(),
                tool: r.tool.clone(),
                outcome: r.outcome.clone(),
                json,
                facts: Facts::of(r),
            };
            row.hash = row.expected_hash();
            prev = row.hash.clone();
            out.push(row);
        }
        Ok(out)
    }
}

/// A store's chains: one per batch it may write at once.
pub(crate) struct Lanes {
    heads: Vec<Mutex<ChainHead>>,
    /// Where a batch that finds every lane busy waits, in turn.
    next: AtomicUsize,
}

impl Lanes {
    pub(crate) fn new(owner: &str, lanes: usize) -> Lanes {
        Lanes {
            heads: (0..lanes.max(1))
                .map(|i| Mutex::new(ChainHead::new(owner, i)))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Holds the first lane's head, so nothing is written on it meanwhile.
    #[cfg(test)]
    pub(crate) async fn hold_first(&self) -> tokio::sync::MutexGuard<'_, ChainHead> {
        self.heads[0].lock().await
    }

    /// How many batches may be written at once.
    pub(crate) fn len(&self) -> usize {
        self.heads.len()
    }

    /// Each lane's chain id, length and last hash (for the log).
    pub(crate) async fn describe(&self) -> Vec<(String, i64, String)> {
        let mut out = Vec::with_capacity(self.heads.len());
        for head in &self.heads {
            out.push(head.lock().await.describe());
        }
        out
    }

    /// Links `records` after a free lane's head and writes them with `write`,
    /// holding that head meanwhile (one batch at a time per chain). Written: the
    /// head moves past them. Not: the lane starts a new segment (see the
    /// module's comment).
    pub(crate) async fn append<F, Fut>(
        &self,
        records: &[AuditRecord],
        write: F,
    ) -> Result<(), StoreError>
    where
        F: FnOnce(Vec<Linked>) -> Fut,
        Fut: Future<Output = Result<(), StoreError>>,
    {
        self.append_at(records, crate::now_ms(), write).await
    }

    /// [`Lanes::append`] with the records stamped `time_ms`.
    pub(crate) async fn append_at<F, Fut>(
        &self,
        records: &[AuditRecord],
        time_ms: i64,
        write: F,
    ) -> Result<(), StoreError>
    where
        F: FnOnce(Vec<Linked>) -> Fut,
        Fut: Future<Output = Result<(), StoreError>>,
    {
        if records.is_empty() {
            return Ok(());
        }
        let free = self.heads.iter().find_map(|h| h.try_lock().ok());
        let mut head = match free {
            Some(head) => head,
            None => {
                let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.heads.len();
                self.heads[turn].lock().await
            }
        };
        let linked = head.link(records, time_ms)?;
        let last = linked.last().map(|l| (l.seq, l.hash.clone()));
        let written = write(linked).await;
        head.settle(last, written)
    }

    /// [`Lanes::append_at`] for a writer off the runtime (the SQLite writer's
    /// own thread): waits for the first lane's head by blocking, and `write`
    /// blocks too.
    pub(crate) fn append_blocking(
        &self,
        records: &[AuditRecord],
        time_ms: i64,
        write: impl FnOnce(Vec<Linked>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut head = self.heads[0].blocking_lock();
        let linked = head.link(records, time_ms)?;
        let last = linked.last().map(|l| (l.seq, l.hash.clone()));
        head.settle(last, write(linked))
    }
}

impl ChainHead {
    /// After a batch whose last row was `last`: written, the head moves past
    /// it; not, the lane starts a new segment (see the module's comment).
    fn settle(
        &mut self,
        last: Option<(i64, String)>,
        written: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match written {
            Ok(()) => {
                if let Some((seq, hash)) = last {
                    self.seq = seq + 1;
                    self.hash = hash;
                }
                Ok(())
            }
            Err(e) => {
                self.segment += 1;
                self.seq = 0;
                self.hash = GENESIS.to_owned();
                Err(e)
            }
        }
    }
}

/// One stored row, as verification reads it.
#[derive(Debug, Clone)]
pub struct ChainRow {
    /// The row's id in the trail (what `audit` and the console show).
    pub id: i64,
    pub linked: Linked,
}

/// How a chain first fails to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Break {
    /// The row's content (or its place) does not match its hash.
    Edited,
    /// Rows between the last intact one and this one are gone.
    Missing { from: i64, to: i64 },
    /// The row does not follow the one before it (its previous hash differs).
    Relinked,
    /// The row stands before the one it follows in the trail (ids and chain
    /// disagree; a chain is written in id order).
    Reordered,
}

/// What verification found about one chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub chain: String,
    /// Rows read in the chain.
    pub records: u64,
    /// The first broken link: the row's id, its sequence number, and how.
    pub broken: Option<(i64, i64, Break)>,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((id, seq, how)) = &self.broken else {
            return write!(
                f,
                "chain {}: {} record(s), intact",
                self.chain, self.records
            );
        };
        write!(
            f,
            "chain {}: broken at record {id} (seq {seq}): ",
            self.chain
        )?;
        match how {
            Break::Edited => write!(f, "its content does not match its hash: it was edited"),
            Break::Missing { from, to } if from == to => {
                write!(
                    f,
                    "the record with seq {from} before it is missing: deleted"
                )
            }
            Break::Missing { from, to } => write!(
                f,
                "the records with seq {from} to {to} before it are missing: deleted"
            ),
            Break::Relinked => write!(
                f,
                "it does not follow the record before it: rows were replaced"
            ),
            Break::Reordered => write!(
                f,
                "it stands before the record it follows in the trail: rows were reordered"
            ),
        }
    }
}

/// Walks rows ordered by chain, then seq, and keeps one verdict per chain. A
/// chain whose oldest rows retention deleted starts after its anchor (the last
/// deleted row's seq and hash).
pub struct Verifier {
    anchors: HashMap<String, (i64, String)>,
    verdicts: Vec<Verdict>,
    /// The current chain's last intact row: seq, hash and id.
    last: Option<(i64, String, i64)>,
}

impl Verifier {
    pub fn new(anchors: HashMap<String, (i64, String)>) -> Verifier {
        Verifier {
            anchors,
            verdicts: Vec::new(),
            last: None,
        }
    }

    /// Checks the next row (in chain, seq order).
    pub fn push(&mut self, row: &ChainRow) {
        let l = &row.linked;
        if self.verdicts.last().is_none_or(|v| v.chain != l.chain) {
            self.verdicts.push(Verdict {
                chain: l.chain.clone(),
                records: 0,
                broken: None,
            });
            self.last = Some(match self.anchors.get(&l.chain) {
                Some((seq, hash)) => (*seq, hash.clone(), i64::MIN),
                None => (-1, GENESIS.to_owned(), i64::MIN),
            });
        }
        let Some(verdict) = self.verdicts.last_mut() else {
            return;
        };
        verdict.records += 1;
        if verdict.broken.is_some() {
            return;
        }
        let (seq, hash, id) = self
            .last
            .clone()
            .unwrap_or((-1, GENESIS.to_owned(), i64::MIN));
        let how = if l.expected_hash() != l.hash {
            Some(Break::Edited)
        } else if l.seq > seq + 1 {
            Some(Break::Missing {
                from: seq + 1,
                to: l.seq - 1,
            })
        } else if l.seq != seq + 1 || l.prev != hash {
            Some(Break::Relinked)
        } else if row.id <= id {
            Some(Break::Reordered)
        } else {
            None
        };
        match how {
            Some(how) => verdict.broken = Some((row.id, l.seq, how)),
            None => self.last = Some((l.seq, l.hash.clone(), row.id)),
        }
    }

    pub fn finish(self) -> Vec<Verdict> {
        self.verdicts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tool: &str) -> AuditRecord {
        serde_json::from_value(serde_json::json!({
            "time": "2026-12-03T00:00:00.000Z", "session": "stdio", "caller": "alice",
            "tool": tool, "upstream": null, "arguments": {}, "reason": null,
            "unknown_keys": [], "unknown_mode": null, "decision": "allowed",
            "outcome": "ok", "duration_ms": 1.0, "idempotency_key": null, "replayed": false
        }))
        .unwrap()
    }

    fn chain_of(n: usize) -> Vec<ChainRow> {
        let head = ChainHead::new("c", 0);
        let records: Vec<_> = (0..n).map(|i| record(&format!("t{i}"))).collect();
        let linked = head.link(&records, 5).unwrap();
        linked
            .into_iter()
            .enumerate()
            .map(|(i, linked)| ChainRow {
                id: i as i64 + 1,
                linked,
            })
            .collect()
    }

    fn verify(rows: &[ChainRow]) -> Vec<String> {
        let mut v = Verifier::new(HashMap::new());
        rows.iter().for_each(|r| v.push(r));
        v.finish().iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn hashes_are_written_as_before_in_lower_case_hex() {
        let bytes: Vec<u8> = (0..=255).collect();
        let before: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&bytes), before);
    }

    #[test]
    fn an_untouched_chain_is_intact() {
        assert_eq!(verify(&chain_of(4)), ["chain c: 4 record(s), intact"]);
    }

    #[test]
    fn an_edited_row_is_named() {
        let mut rows = chain_of(4);
        rows[2].linked.json = rows[2].linked.json.replace("alice", "mallory");
        assert_eq!(
            verify(&rows),
            ["chain c: broken at record 3 (seq 2): its content does not match its hash: it was edited"]
        );
        let mut rows = chain_of(4);
        rows[1].linked.caller = None;
        assert!(verify(&rows)[0].contains("record 2 (seq 1)"));
    }

    #[test]
    fn deleted_rows_are_named() {
        let mut rows = chain_of(5);
        rows.remove(1);
        assert_eq!(
            verify(&rows),
            ["chain c: broken at record 3 (seq 2): the record with seq 1 before it is missing: deleted"]
        );
        let mut rows = chain_of(5);
        rows.drain(0..3);
        assert_eq!(
            verify(&rows),
            ["chain c: broken at record 4 (seq 3): the records with seq 0 to 2 before it are missing: deleted"]
        );
    }

    #[test]
    fn reordered_rows_are_named() {
        // Two rows' contents swapped, each keeping its seq: neither matches its hash.
        let mut rows = chain_of(4);
        let (a, b) = (rows[1].linked.clone(), rows[2].linked.clone());
        rows[1].linked = Linked { seq: 1, ..b };
        rows[2].linked = Linked { seq: 2, ..a };
        assert!(verify(&rows)[0].starts_with("chain c: broken at record 2 (seq 1): its content"));
        // A row rehashed to follow another than its predecessor.
        let mut rows = chain_of(4);
        rows[2].linked.prev = rows[0].linked.hash.clone();
        rows[2].linked.hash = rows[2].linked.expected_hash();
        assert_eq!(
            verify(&rows),
            ["chain c: broken at record 3 (seq 2): it does not follow the record before it: rows were replaced"]
        );
        // Whole rows swapped in the trail: the chain holds, the ids do not.
        let mut rows = chain_of(4);
        (rows[1].id, rows[2].id) = (rows[2].id, rows[1].id);
        assert_eq!(
            verify(&rows),
            ["chain c: broken at record 2 (seq 2): it stands before the record it follows in the trail: rows were reordered"]
        );
    }

    #[test]
    fn a_chain_pruned_by_retention_starts_after_its_anchor() {
        let mut rows = chain_of(5);
        let anchor = (1, rows[1].linked.hash.clone());
        rows.drain(0..2);
        let mut v = Verifier::new(HashMap::from([("c".to_owned(), anchor)]));
        rows.iter().for_each(|r| v.push(r));
        assert_eq!(v.finish()[0].to_string(), "chain c: 3 record(s), intact");
    }

    #[tokio::test]
    async fn a_failed_write_opens_a_new_segment() {
        let lanes = Lanes::new("o", 1);
        let ok = |_| async { Ok(()) };
        lanes.append(&[record("a"), record("b")], ok).await.unwrap();
        assert_eq!(lanes.describe().await[0].1, 2);
        let fail = |_| async { Err(StoreError::Unavailable("down".into())) };
        lanes.append(&[record("c")], fail).await.unwrap_err();
        let mut seen = Vec::new();
        let keep = |rows: Vec<Linked>| {
            seen = rows;
            async { Ok(()) }
        };
        lanes.append(&[record("c")], keep).await.unwrap();
        assert_eq!((seen[0].chain.as_str(), seen[0].seq), ("o.1", 0));
        assert_eq!(seen[0].prev, GENESIS);
    }

    #[tokio::test]
    async fn a_batch_written_beside_another_takes_the_next_lane() {
        let lanes = Lanes::new("o", 2);
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let a = [record("a")];
        let first = lanes.append(&a, |_| async {
            let _ = held.await;
            Ok(())
        });
        let mut chain = String::new();
        let second = async {
            tokio::task::yield_now().await;
            let r = lanes
                .append(&[record("b")], |rows: Vec<Linked>| {
                    chain = rows[0].chain.clone();
                    async { Ok(()) }
                })
                .await;
            let _ = release.send(());
            r
        };
        let (a, b) = tokio::join!(first, second);
        a.unwrap();
        b.unwrap();
        assert_eq!(chain, "o-1");
    }
}
