//! Searching the audit trail by the console's and `audit`'s filters: only the
//! filters that are set go into the statement, so SQLite's planner can use
//! their indexes (a `?1 IS NULL OR caller = ?1` hides them from it).

use super::Sqlite;
use crate::{AuditFilter, AuditRecord, StoreError};
use rusqlite::types::Value as Sql;

/// A search's statement and its parameters: `columns` of the records matching
/// `filter` (and older than `before`), newest or oldest first.
pub(crate) fn search_sql(
    columns: &str,
    filter: &AuditFilter,
    before: Option<i64>,
    newest_first: bool,
) -> (String, Vec<Sql>) {
    let mut sql = format!("SELECT {columns} FROM audit WHERE 1 = 1");
    let mut values = Vec::new();
    let texts = [
        ("caller", &filter.caller),
        ("tool", &filter.tool),
        ("outcome", &filter.outcome),
    ];
    for (column, value) in texts {
        if let Some(v) = value {
            values.push(Sql::Text(v.clone()));
            sql.push_str(&format!(" AND {column} = ?{}", values.len()));
        }
    }
    // The outcome index holds every outcome but `ok` (schema version 7): the
    // planner takes it only for a statement that says so.
    if filter.outcome.as_deref().is_some_and(|o| o != "ok") {
        sql.push_str(" AND outcome <> 'ok'");
    }
    let numbers = [("time_ms >=", filter.since_ms), ("id <", before)];
    for (test, value) in numbers {
        if let Some(v) = value {
            values.push(Sql::Integer(v));
            sql.push_str(&format!(" AND {test} ?{}", values.len()));
        }
    }
    let order = if newest_first { "DESC" } else { "ASC" };
    let limit = match filter.limit {
        0 => i64::MAX,
        n => n as i64,
    };
    values.push(Sql::Integer(limit));
    sql.push_str(&format!(" ORDER BY id {order} LIMIT ?{}", values.len()));
    (sql, values)
}

impl Sqlite {
    /// Audit records matching `filter`, older than `before`, newest first, with their ids.
    pub async fn recent(
        &self,
        filter: AuditFilter,
        before: Option<i64>,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        let (sql, values) = search_sql("id, record", &filter, before, true);
        self.with(move |conn| {
            let mut stmt = conn.prepare(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(&values), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (id, text) = row?;
                if let Ok(rec) = serde_json::from_str(&text) {
                    out.push((id, rec));
                }
            }
            Ok(out)
        })
        .await
    }

    /// Audit records matching `filter`, oldest first.
    pub async fn query(&self, filter: AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
        let (sql, values) = search_sql("record", &filter, None, false);
        self.with(move |conn| {
            let mut stmt = conn.prepare(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(&values), |r| {
                r.get::<_, String>(0)
            })?;
            let mut out = Vec::new();
            for row in rows {
                if let Ok(rec) = serde_json::from_str(&row?) {
                    out.push(rec);
                }
            }
            Ok(out)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What SQLite's planner says it does for a search.
    fn plan(filter: &AuditFilter, before: Option<i64>) -> String {
        let dir = std::env::temp_dir().join(format!("warden-search-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.db", rand_tag(filter, before)));
        let _ = std::fs::remove_file(&path);
        let store = Sqlite::open(&path).unwrap();
        let (sql, values) = search_sql("id, record", filter, before, true);
        let conn = store.conn.lock().unwrap();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map(rusqlite::params_from_iter(&values), |r| {
                r.get::<_, String>(3)
            })
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
    }

    /// A file name of its own per search, as tests run at once.
    fn rand_tag(filter: &AuditFilter, before: Option<i64>) -> String {
        format!("{filter:?}{before:?}")
            .bytes()
            .filter(u8::is_ascii_alphanumeric)
            .map(char::from)
            .collect()
    }

    #[test]
    fn each_filter_searches_by_its_index() {
        let by = |f: fn(&mut AuditFilter)| {
            let mut filter = AuditFilter {
                limit: 50,
                ..Default::default()
            };
            f(&mut filter);
            plan(&filter, None)
        };
        assert!(by(|f| f.caller = Some("alice".into())).contains("INDEX audit_caller"));
        assert!(by(|f| f.tool = Some("up.echo".into())).contains("INDEX audit_tool"));
        assert!(by(|f| f.outcome = Some("failed".into())).contains("INDEX audit_outcome"));
        // `ok`, which most records are, is not in it: the newest by id.
        let ok = by(|f| f.outcome = Some("ok".into()));
        assert!(
            !ok.contains("audit_outcome") && !ok.contains("TEMP B-TREE"),
            "{ok}"
        );
        // By time, or by nothing: the newest by id, read in order with no sort
        // (ids grow with time), stopping at the limit.
        for plan in [
            by(|f| f.since_ms = Some(5)),
            plan(&AuditFilter::default(), Some(10)),
        ] {
            assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        }
    }

    #[test]
    fn the_statement_holds_only_the_filters_that_are_set() {
        let filter = AuditFilter {
            tool: Some("t".into()),
            since_ms: Some(7),
            ..Default::default()
        };
        let (sql, values) = search_sql("record", &filter, Some(9), false);
        assert_eq!(
            sql,
            "SELECT record FROM audit WHERE 1 = 1 AND tool = ?1 AND time_ms >= ?2 AND id < ?3 ORDER BY id ASC LIMIT ?4"
        );
        assert_eq!(
            values,
            [
                Sql::Text("t".into()),
                Sql::Integer(7),
                Sql::Integer(9),
                Sql::Integer(i64::MAX)
            ]
        );
    }
}
