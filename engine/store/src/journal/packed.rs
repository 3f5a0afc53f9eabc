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
//! `^` reference, an `@` blob): one reader, `Store::run_records`, turns
//! either form into the same records.
//!
//! An inline object or array (a step's outputs, most inputs) is written as
//! itself, not as a string holding its text (migration 0015): escaping
//! every quote of text that is already JSON cost ~3,600 instructions per
//! webhook run and ~60 bytes of backslashes. Everything else, a reference,
//! a blob, an error, an inline string, number or `null`, is a string, as
//! every value was before; a string's content is the column text, anything
//! else's text is. Older rows read as they did.

use serde::{Deserialize, Deserializer};

use super::{check_inline, column_text, error_text};
use crate::blobs::{Blobs, Stored, ValueRef};
use crate::{Error, Record, Result};

crate::from_row! {
    /// One record's columns before its values are resolved into a
    /// [`crate::Record`]: a `journal` row, or one packed record (in this order).
    #[derive(Debug, Deserialize)]
    pub(crate) struct Columns {
        pub seq: i64,
        pub kind: i64,
        pub node: String,
        pub lineage: String,
        pub activation: String,
        pub attempt: i64,
        pub at_us: i64,
        #[serde(deserialize_with = "value_column")]
        pub data: Option<String>,
        pub error: Option<String>,
        pub duration_us: Option<i64>,
        #[serde(deserialize_with = "value_column")]
        pub input: Option<String>,
    }
}

/// A packed value column: a string holds the column text; an object or an
/// array is the column text itself (see the module's docs).
fn value_column<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let Some(raw) = Option::<&serde_json::value::RawValue>::deserialize(d)? else {
        return Ok(None);
    };
    let text = raw.get();
    if text.starts_with(['{', '[']) {
        Ok(Some(text.to_owned()))
    } else {
        String::deserialize(raw)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

/// The `runs.steps` text of `records` (one run's, in seq order), written
/// from the records themselves: their inline values are not copied into
/// `journal` row columns first.
pub(crate) fn pack(blobs: &Blobs, records: &[Record]) -> Result<String> {
    let mut out = Vec::with_capacity(256 * records.len());
    // A reference's column text, written here before it goes out as a string.
    let mut scratch = Vec::new();
    out.push(b'[');
    for (i, r) in records.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let error = r.error.as_ref().map(error_text).transpose()?;
        let head = (
            i64::try_from(r.seq).map_err(|_| Error::SeqOutOfRange(r.seq))?,
            r.kind as i64,
            &*r.node,
            r.lineage.as_str(),
            r.activation.as_str(),
            i64::from(r.attempt),
            r.at_us,
        );
        // `[seq, …, at_us]` less its `]`, then the value columns.
        serde_json::to_writer(&mut out, &head).map_err(Error::InvalidJson)?;
        out.pop();
        out.push(b',');
        value(&mut out, &mut scratch, blobs, r.data.as_ref())?;
        out.push(b',');
        serde_json::to_writer(&mut out, &error).map_err(Error::InvalidJson)?;
        out.push(b',');
        serde_json::to_writer(&mut out, &r.duration_us).map_err(Error::InvalidJson)?;
        out.push(b',');
        value(&mut out, &mut scratch, blobs, r.input.as_ref())?;
        out.push(b']');
    }
    out.push(b']');
    // serde_json writes UTF-8 only.
    String::from_utf8(out)
        .map_err(|e| Error::InvalidJson(<serde_json::Error as serde::ser::Error>::custom(e)))
}

/// Writes a value column: an inline object or array as itself, anything
/// else as a string holding its column text (what [`column_text`] gives; a
/// reference is written out here rather than through its allocations), or
/// `null`.
fn value(
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    blobs: &Blobs,
    stored: Option<&Stored>,
) -> Result<()> {
    let json = |out: &mut Vec<u8>, text: &str| {
        serde_json::to_writer(out, text).map_err(Error::InvalidJson)
    };
    match stored {
        None => {
            out.extend_from_slice(b"null");
            Ok(())
        }
        Some(Stored::Inline(t)) => {
            check_inline(t)?;
            if t.starts_with(['{', '[']) {
                out.extend_from_slice(t.as_bytes());
                Ok(())
            } else {
                json(out, t)
            }
        }
        Some(Stored::Ref(r)) => {
            scratch.clear();
            scratch.push(b'^');
            push_ref(scratch, r);
            json(out, utf8(scratch)?)
        }
        Some(Stored::Refs(outputs)) => {
            // `^^` and the JSON of `[[port, ref], ...]`.
            scratch.clear();
            scratch.extend_from_slice(b"^^[");
            let mut one = Vec::new();
            for (i, (port, r)) in outputs.iter().enumerate() {
                if i > 0 {
                    scratch.push(b',');
                }
                scratch.push(b'[');
                json(scratch, port)?;
                scratch.push(b',');
                one.clear();
                push_ref(&mut one, r);
                json(scratch, utf8(&one)?)?;
                scratch.push(b']');
            }
            scratch.push(b']');
            json(out, utf8(scratch)?)
        }
        Some(other) => json(out, &column_text(blobs, other)?),
    }
}

/// A reference as its column names it: `input`, or `<seq>/<port>`.
fn push_ref(out: &mut Vec<u8>, r: &ValueRef) {
    use std::io::Write;
    match r {
        ValueRef::RunInput => out.extend_from_slice(b"input"),
        // Writing into a Vec cannot fail.
        ValueRef::Output { seq, port } => {
            let _ = write!(out, "{seq}/{port}");
        }
    }
}

fn utf8(bytes: &[u8]) -> Result<&str> {
    // Built from `str`s only: never fails.
    std::str::from_utf8(bytes)
        .map_err(|e| Error::InvalidJson(<serde_json::Error as serde::ser::Error>::custom(e)))
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
    use super::*;
    use crate::blobs::{Stored, ValueRef};

    /// A blob store in a temporary dir (kept while the dir is).
    fn blobs() -> Result<(tempfile::TempDir, Blobs)> {
        let dir = tempfile::tempdir().expect("a temporary dir");
        let blobs = Blobs::open(dir.path().to_path_buf())?;
        Ok((dir, blobs))
    }

    fn record(seq: u64, data: Option<Stored>, input: Option<Stored>) -> Record {
        Record {
            run_id: "r".into(),
            seq,
            kind: crate::RecordKind::Succeeded,
            node: "set".into(),
            lineage: "0.1".into(),
            activation: "0".into(),
            attempt: 1,
            at_us: 1_700_000_000_000_000 + seq as i64,
            data,
            input,
            error: None,
            duration_us: Some(12),
        }
    }

    #[test]
    fn records_come_back_column_for_column() -> Result<()> {
        let (_dir, blobs) = blobs()?;
        let inline = r#"[["out",{"id":7,"note":"a \"quoted\" line\nand ünïcode"}]]"#;
        let hash = "a".repeat(64);
        let out = |seq| ValueRef::Output {
            seq,
            port: "out".into(),
        };
        let mut failed = record(4, None, Some(Stored::Ref(out(2))));
        failed.kind = crate::RecordKind::Failed;
        failed.error = Some(sluice_api::RunError::of_run("no \"such\" host"));
        let records = [
            record(
                1,
                Some(Stored::Refs(vec![
                    ("out".into(), ValueRef::RunInput),
                    ("odd \"port\"".into(), out(7)),
                ])),
                Some(Stored::Ref(ValueRef::RunInput)),
            ),
            record(
                2,
                Some(Stored::Inline(inline.into())),
                Some(Stored::Ref(out(1))),
            ),
            record(3, Some(Stored::Blob(hash.clone())), None),
            failed,
        ];
        let packed = pack(&blobs, &records)?;
        // The inline object is in the text as itself, not escaped.
        assert!(packed.contains(&format!(",{inline},")), "{packed}");
        let back = unpack("r", &packed)?;
        assert_eq!(back.len(), 4);
        let texts = |v: &Option<Stored>| -> Result<Option<String>> {
            Ok(v.as_ref()
                .map(|v| column_text(&blobs, v))
                .transpose()?
                .map(|t| t.into_owned()))
        };
        for (r, b) in records.iter().zip(&back) {
            assert_eq!(
                (b.seq, b.kind, &*b.node, &*b.lineage, &*b.activation),
                (
                    r.seq as i64,
                    r.kind as i64,
                    &*r.node,
                    &*r.lineage,
                    &*r.activation
                )
            );
            assert_eq!(
                (b.attempt, b.at_us, b.duration_us),
                (i64::from(r.attempt), r.at_us, r.duration_us)
            );
            assert_eq!(b.data, texts(&r.data)?);
            assert_eq!(b.input, texts(&r.input)?);
            assert_eq!(
                b.error.as_deref(),
                r.error.as_ref().map(error_text).transpose()?.as_deref()
            );
        }
        assert_eq!(
            value_texts(&packed),
            [
                r#"^^[["out","input"],["odd \"port\"","7/out"]]"#,
                "^input",
                inline,
                "^1/out",
                &format!("@{hash}"),
                "^2/out",
            ]
        );
        Ok(())
    }

    #[test]
    fn a_value_that_is_not_a_column_is_refused_not_packed() -> Result<()> {
        let (_dir, blobs) = blobs()?;
        for bad in [
            Stored::Inline("@not-a-blob".into()),
            Stored::Inline(String::new()),
            Stored::Blob("../etc/passwd".into()),
        ] {
            assert!(pack(&blobs, &[record(1, Some(bad), None)]).is_err());
        }
        Ok(())
    }

    /// Inline values that are not objects or arrays stay strings: a JSON
    /// string, a number, `null` (as a value, unlike a missing column).
    #[test]
    fn inline_scalars_and_strings_come_back_as_they_went() -> Result<()> {
        let (_dir, blobs) = blobs()?;
        for inline in [
            r#""^not a ref""#,
            r#""[not an array""#,
            "42",
            "null",
            "true",
        ] {
            let r = record(1, Some(Stored::Inline(inline.into())), None);
            let packed = pack(&blobs, &[r])?;
            let back = unpack("r", &packed)?;
            assert_eq!(back[0].data.as_deref(), Some(inline), "{packed}");
            assert_eq!(back[0].input, None, "{packed}");
        }
        Ok(())
    }

    /// A row packed before migration 0015 (every value a string), as
    /// stored by a webhook run: it reads as it did.
    #[test]
    fn rows_packed_with_strings_read_as_before() -> Result<()> {
        let old = r#"[[0,2,"hook","","0",1,1796561117819850,"^^[[\"out\",\"input\"]]",null,14,"^input"],[1,2,"set","","0",1,1796561117820014,"[[\"out\",{\"id\":7,\"tier\":\"gold\"}]]",null,15,"^input"]]"#;
        let back = unpack("r", old)?;
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].data.as_deref(), Some(r#"^^[["out","input"]]"#));
        assert_eq!(back[0].input.as_deref(), Some("^input"));
        assert_eq!(
            back[1].data.as_deref(),
            Some(r#"[["out",{"id":7,"tier":"gold"}]]"#)
        );
        assert_eq!(
            (back[1].seq, &*back[1].node, back[1].duration_us),
            (1, "set", Some(15))
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
