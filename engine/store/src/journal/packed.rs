//! The journal of a run sealed whole ([`super::Journal::seal_run`]: a run
//! in one go, recorded when it has ended) kept in its run row, `runs.steps`,
//! instead of one `journal` row per record. A webhook run of three pure
//! steps wrote four rows (its run, and three records at ~11,600 instructions
//! of b-tree insert each); now it writes one, and packing the records costs
//! ~6,000 instructions on the run's own task (`cargo xtask bench run-cost`
//! under callgrind).
//!
//! The text is a JSON array with one array per record, its columns in the
//! `journal` table's order: `[seq, kind, node, lineage, activation,
//! attempt, at_us, data, error, duration_us, input]`. `data`, `error` and
//! `input` hold exactly what those columns would (inline JSON text, a
//! `^` reference, an `@` blob), as strings: one reader,
//! `Store::run_records`, turns either form into the same records.

use serde::Deserialize;

use super::JournalRow;
use crate::{Error, Result};

/// One record's columns before its values are resolved into a
/// [`crate::Record`]: a `journal` row, or one packed record (in this order).
#[derive(Debug, Deserialize, sqlx::FromRow)]
pub(crate) struct Columns {
    pub seq: i64,
    pub kind: i64,
    pub node: String,
    pub lineage: String,
    pub activation: String,
    pub attempt: i64,
    pub at_us: i64,
    pub data: Option<String>,
    pub error: Option<String>,
    pub duration_us: Option<i64>,
    pub input: Option<String>,
}

/// The `runs.steps` text of `records` (one run's, in seq order).
pub(crate) fn pack(records: &[JournalRow]) -> Result<String> {
    let rows: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.seq,
                r.kind,
                &*r.node,
                &*r.lineage,
                &*r.activation,
                r.attempt,
                r.at_us,
                r.data.as_deref(),
                r.error.as_deref(),
                r.duration_us,
                r.input.as_deref(),
            )
        })
        .collect();
    serde_json::to_string(&rows).map_err(Error::InvalidJson)
}

/// The records of a `runs.steps` text; `run_id` names the run in the
/// error if the text is not what [`pack`] writes.
pub(crate) fn unpack(run_id: &str, text: &str) -> Result<Vec<Columns>> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt {
        table: "runs",
        key: format!("{run_id} (steps)"),
        detail: e.to_string(),
    })
}

/// The value texts (`data`, `input`) of a `runs.steps` text, for the blob
/// collector's scan; none if it cannot be read (a corrupt row keeps no blob
/// alive, as a corrupt column does not).
pub(crate) fn value_texts(text: &str) -> Vec<String> {
    match serde_json::from_str::<Vec<Columns>>(text) {
        Ok(records) => records
            .into_iter()
            .flat_map(|r| [r.data, r.input])
            .flatten()
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn row(seq: i64, data: Option<&str>, input: Option<&str>) -> JournalRow {
        JournalRow {
            run_id: "r".into(),
            seq,
            kind: 3,
            node: "set".into(),
            lineage: "0.1".into(),
            activation: "0".into(),
            attempt: 1,
            at_us: 1_700_000_000_000_000 + seq,
            data: data.map(Arc::from),
            input: input.map(Arc::from),
            error: None,
            duration_us: Some(12),
        }
    }

    #[test]
    fn records_come_back_column_for_column() -> Result<()> {
        let inline = r#"[["out",{"id":7,"note":"a \"quoted\" line\nand ünïcode"}]]"#;
        let rows = [
            row(1, Some("^^[[\"out\",\"input\"]]"), Some("^input")),
            row(2, Some(inline), Some("^1/out")),
            row(3, Some(&format!("@{}", "a".repeat(64))), None),
        ];
        let packed = pack(&rows)?;
        let back = unpack("r", &packed)?;
        assert_eq!(back.len(), 3);
        for (r, b) in rows.iter().zip(&back) {
            assert_eq!(
                (b.seq, b.kind, &*b.node, &*b.lineage, &*b.activation),
                (r.seq, r.kind, &*r.node, &*r.lineage, &*r.activation)
            );
            assert_eq!(
                (b.attempt, b.at_us, b.duration_us),
                (r.attempt, r.at_us, r.duration_us)
            );
            assert_eq!(b.data.as_deref(), r.data.as_deref());
            assert_eq!(b.input.as_deref(), r.input.as_deref());
            assert_eq!(b.error.as_deref(), r.error.as_deref());
        }
        assert_eq!(
            value_texts(&packed),
            [
                "^^[[\"out\",\"input\"]]",
                "^input",
                inline,
                "^1/out",
                &format!("@{}", "a".repeat(64))
            ]
        );
        Ok(())
    }

    #[test]
    fn a_damaged_text_is_an_error_naming_the_run() {
        let err = unpack("run-9", "[[1, 3, \"set\"").expect_err("damaged");
        assert!(err.to_string().contains("run-9"), "{err}");
        assert!(value_texts("not json").is_empty());
    }
}
