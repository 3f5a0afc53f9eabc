//! A message as the node view shows it: a table (rows of an array, or one
//! row of an object) and a schema (every key with its type and an example),
//! each field carrying the template expression that reads it, for dragging
//! onto a parameter. Pure, so it is tested without a browser.

use serde_json::Value;

use crate::fields::{child_path, key_path};

/// The most rows and columns a table shows.
pub const MAX_ROWS: usize = 100;
pub const MAX_COLUMNS: usize = 30;
/// The longest text a cell or an example shows.
const MAX_TEXT: usize = 80;
/// The deepest a schema goes.
const MAX_DEPTH: usize = 8;
/// The most entries a schema lists.
const MAX_ENTRIES: usize = 400;

/// A message as rows and columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// Column names, each with the expression reading it (in the first
    /// row, for an array).
    pub columns: Vec<(String, String)>,
    pub rows: Vec<Vec<String>>,
    /// Rows not shown.
    pub more: usize,
}

/// A value in a cell: text as is, other values as compact JSON, cut.
pub fn cell(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    cut(&text)
}

fn cut(text: &str) -> String {
    if text.chars().count() <= MAX_TEXT {
        text.to_string()
    } else {
        let mut t: String = text.chars().take(MAX_TEXT - 1).collect();
        t.push('…');
        t
    }
}

/// `value` (read by `root`) as a table: an array's items as rows, an
/// object as one row; columns are the objects' keys in order of first
/// appearance. A scalar, or an array of scalars, is one `value` column.
pub fn table(value: &Value, root: &str) -> Table {
    let (rows, first): (Vec<&Value>, String) = match value {
        Value::Array(items) => (items.iter().collect(), child_path(root, "0")),
        other => (vec![other], root.to_string()),
    };
    let shown = &rows[..rows.len().min(MAX_ROWS)];
    let objects = !shown.is_empty() && shown.iter().all(|r| r.is_object());
    let mut columns: Vec<(String, String)> = Vec::new();
    if objects {
        for r in shown {
            for k in r.as_object().into_iter().flatten().map(|(k, _)| k) {
                if columns.len() < MAX_COLUMNS && !columns.iter().any(|(c, _)| c == k) {
                    columns.push((k.clone(), key_path(&first, k)));
                }
            }
        }
    } else {
        columns.push(("value".to_string(), first));
    }
    let rows_out = shown
        .iter()
        .map(|r| {
            if objects {
                columns
                    .iter()
                    .map(|(k, _)| r.get(k).map(cell).unwrap_or_default())
                    .collect()
            } else {
                vec![cell(r)]
            }
        })
        .collect();
    Table {
        columns,
        rows: rows_out,
        more: rows.len() - shown.len(),
    }
}

/// One key of a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub depth: usize,
    pub key: String,
    /// The expression that reads it (`input.customer.name`).
    pub path: String,
    /// `string`, `number`, `boolean`, `null`, `object`, `array`.
    pub ty: &'static str,
    /// Its value, for scalars (cut); for arrays, how many items.
    pub example: String,
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Every key of `value` (read by `root`), depth first: an array shows its
/// first item's keys under `[0]`.
pub fn schema(value: &Value, root: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    walk(value, root, 0, &mut out);
    out
}

fn walk(v: &Value, path: &str, depth: usize, out: &mut Vec<Entry>) {
    if depth >= MAX_DEPTH {
        return;
    }
    let push = |key: String, child: &Value, path: String, out: &mut Vec<Entry>| {
        if out.len() >= MAX_ENTRIES {
            return;
        }
        let example = match child {
            Value::Array(items) => format!("{} items", items.len()),
            Value::Object(map) => format!("{} keys", map.len()),
            other => cell(other),
        };
        out.push(Entry {
            depth,
            key,
            path: path.clone(),
            ty: type_of(child),
            example,
        });
        walk(child, &path, depth + 1, out);
    };
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                push(k.clone(), child, key_path(path, k), out);
            }
        }
        Value::Array(items) => {
            if let Some(first) = items.first() {
                push("[0]".to_string(), first, child_path(path, "0"), out);
            }
        }
        _ => {}
    }
}

/// The template that reads `path`.
pub fn template(path: &str) -> String {
    format!("{{{{ {path} }}}}")
}

/// `text` with `expr` dropped in: at the selection when there is one
/// (`start..end` in UTF-16 units, as the browser counts), else at the end;
/// an empty field becomes the expression alone. Returns the text and where
/// the caret goes.
pub fn insert(text: &str, expr: &str, selection: Option<(u32, u32)>) -> (String, u32) {
    let units: Vec<u16> = text.encode_utf16().collect();
    let expr_units = expr.encode_utf16().count() as u32;
    let (start, end) = match selection {
        Some((s, e)) if (s as usize) <= units.len() && s <= e => {
            (s as usize, (e as usize).min(units.len()))
        }
        _ => (units.len(), units.len()),
    };
    let mut out = String::from_utf16_lossy(&units[..start]);
    out.push_str(expr);
    out.push_str(&String::from_utf16_lossy(&units[end..]));
    (out, start as u32 + expr_units)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arrays_of_objects_are_rows_and_objects_one_row() {
        let t = table(
            &json!([{"id": 1, "name": "Ana"}, {"id": 2, "tags": ["a"], "first name": "Bo"}]),
            "input",
        );
        assert_eq!(
            t.columns,
            [
                ("id".to_string(), "input[0].id".to_string()),
                ("name".to_string(), "input[0].name".to_string()),
                ("tags".to_string(), "input[0].tags".to_string()),
                (
                    "first name".to_string(),
                    "input[0][\"first name\"]".to_string()
                ),
            ]
        );
        assert_eq!(t.rows[0], ["1", "Ana", "", ""]);
        assert_eq!(t.rows[1], ["2", "", "[\"a\"]", "Bo"]);
        let t = table(&json!({"total": 12.5, "ok": true}), "nodes.sum");
        assert_eq!(
            t.columns[0],
            ("total".to_string(), "nodes.sum.total".to_string())
        );
        assert_eq!(t.rows, [["12.5", "true"]]);
        assert_eq!(t.more, 0);
    }

    #[test]
    fn scalars_are_one_column_and_long_tables_are_cut() {
        let t = table(&json!("hello"), "input");
        assert_eq!(t.columns, [("value".to_string(), "input".to_string())]);
        assert_eq!(t.rows, [["hello"]]);
        let many: Vec<Value> = (0..250).map(|i| json!(i)).collect();
        let t = table(&Value::Array(many), "input");
        assert_eq!((t.rows.len(), t.more), (MAX_ROWS, 150));
        assert_eq!(t.columns[0].1, "input[0]");
        let long = "x".repeat(200);
        assert_eq!(cell(&json!(long)).chars().count(), MAX_TEXT);
    }

    #[test]
    fn a_schema_lists_every_key_with_the_path_that_reads_it() {
        let s = schema(
            &json!({"body": {"name": "Ana", "items": [{"sku": "A-1"}]}, "n": null}),
            "input",
        );
        let rows: Vec<(usize, &str, &str, &str, &str)> = s
            .iter()
            .map(|e| {
                (
                    e.depth,
                    e.key.as_str(),
                    e.path.as_str(),
                    e.ty,
                    e.example.as_str(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (0, "body", "input.body", "object", "2 keys"),
                (1, "name", "input.body.name", "string", "Ana"),
                (1, "items", "input.body.items", "array", "1 items"),
                (2, "[0]", "input.body.items[0]", "object", "1 keys"),
                (3, "sku", "input.body.items[0].sku", "string", "A-1"),
                (0, "n", "input.n", "null", ""),
            ]
        );
        assert_eq!(template("input.body.name"), "{{ input.body.name }}");
        // A key that looks like a number is still a key of its object.
        let by_year = schema(&json!({"2024": {"total": 3}}), "input");
        assert_eq!(by_year[0].path, "input[\"2024\"]");
        assert_eq!(by_year[1].path, "input[\"2024\"].total");
        assert_eq!(
            table(&json!({"2024": 1}), "input").columns[0].1,
            "input[\"2024\"]"
        );
        // Deep values stop at the depth limit instead of recursing on.
        let mut deep = json!(1);
        for _ in 0..50 {
            deep = json!({ "a": deep });
        }
        assert_eq!(schema(&deep, "input").len(), MAX_DEPTH);
    }

    #[test]
    fn a_dropped_field_goes_at_the_caret_or_at_the_end() {
        let e = "{{ input.id }}";
        assert_eq!(insert("", e, None), (e.to_string(), 14));
        assert_eq!(
            insert("http://x/orders/", e, None),
            ("http://x/orders/{{ input.id }}".to_string(), 30)
        );
        assert_eq!(
            insert("a-b", e, Some((1, 2))),
            ("a{{ input.id }}b".to_string(), 15)
        );
        // Selection counted in UTF-16 units, as the browser gives it.
        assert_eq!(insert("é😀x", e, Some((3, 3))).0, "é😀{{ input.id }}x");
        // A selection past the end falls back to the end.
        assert_eq!(insert("ab", e, Some((9, 9))).0, "ab{{ input.id }}");
    }
}
