//! Reading SQL text just enough to find named parameters (`:name`) outside
//! string literals, quoted identifiers and comments, and to rewrite them
//! into the server's positional placeholders. Values are never spliced into
//! the text: they travel as bound parameters.

use crate::Dialect;

/// SQL with `:name` placeholders rewritten: `$1, $2…` for PostgreSQL (a
/// name used twice is the same `$n`), `?` for MySQL and SQLite (one per
/// use). `order` lists, per positional parameter, the name it binds.
#[derive(Debug, PartialEq, Eq)]
pub struct Rewritten {
    pub sql: String,
    pub order: Vec<String>,
}

/// Rewrites `:name` placeholders. `::` (a PostgreSQL cast), `:=` and a colon
/// not followed by a name are left as they are.
pub fn named_to_positional(sql: &str, dialect: Dialect) -> Rewritten {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut order: Vec<String> = Vec::new();
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\'' => {
                // E'…' (PostgreSQL) and every MySQL string take backslash escapes.
                let backslash = dialect == Dialect::MySql
                    || (i > 0
                        && (b[i - 1] == b'E' || b[i - 1] == b'e')
                        && !ident_byte_before(b, i - 1));
                i = skip_quoted(b, i, b'\'', backslash);
            }
            b'"' => i = skip_quoted(b, i, b'"', dialect == Dialect::MySql),
            b'`' if dialect != Dialect::Postgres => i = skip_quoted(b, i, b'`', false),
            b'[' if dialect == Dialect::Sqlite => {
                i = match memchr(b']', &b[i + 1..]) {
                    Some(n) => i + 1 + n + 1,
                    None => b.len(),
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = match memchr(b'\n', &b[i..]) {
                    Some(n) => i + n + 1,
                    None => b.len(),
                }
            }
            b'#' if dialect == Dialect::MySql => {
                i = match memchr(b'\n', &b[i..]) {
                    Some(n) => i + n + 1,
                    None => b.len(),
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => i = skip_block_comment(b, i, dialect),
            b'$' if dialect == Dialect::Postgres => i = skip_dollar_quoted(b, i),
            b':' => {
                if b.get(i + 1) == Some(&b':') {
                    i += 2;
                    continue;
                }
                let start = i + 1;
                let mut end = start;
                if end < b.len() && (b[end].is_ascii_alphabetic() || b[end] == b'_') {
                    end += 1;
                    while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                        end += 1;
                    }
                }
                // (A PostgreSQL array slice `a[1:n]` reads as a placeholder
                // too; `a[1: n]` does not.)
                if end == start {
                    i += 1;
                    continue;
                }
                let name = &sql[start..end];
                out.push_str(&sql[copied..i]);
                match dialect {
                    Dialect::Postgres => {
                        let n = match order.iter().position(|o| o == name) {
                            Some(p) => p + 1,
                            None => {
                                order.push(name.to_string());
                                order.len()
                            }
                        };
                        out.push('$');
                        out.push_str(&n.to_string());
                    }
                    Dialect::MySql | Dialect::Sqlite => {
                        order.push(name.to_string());
                        out.push('?');
                    }
                }
                copied = end;
                i = end;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied..]);
    Rewritten { sql: out, order }
}

fn ident_byte_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&c| c == needle)
}

/// Skips `q…q` from `start` (the opening quote); a doubled quote is one
/// quote, and with `backslash` a backslash escapes the next byte.
fn skip_quoted(b: &[u8], start: usize, q: u8, backslash: bool) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        if backslash && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == q {
            if b.get(i + 1) == Some(&q) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

/// Skips `/* … */`; PostgreSQL's nest.
fn skip_block_comment(b: &[u8], start: usize, dialect: Dialect) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i + 1 < b.len() {
        if b[i] == b'/' && b[i + 1] == b'*' {
            depth += 1;
            i += 2;
            if dialect != Dialect::Postgres && depth > 1 {
                depth = 1;
            }
        } else if b[i] == b'*' && b[i + 1] == b'/' {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// Skips a PostgreSQL dollar-quoted string (`$$…$$`, `$tag$…$tag$`); a `$`
/// that does not open one (`$1`, part of a name) is passed over.
fn skip_dollar_quoted(b: &[u8], start: usize) -> usize {
    if ident_byte_before(b, start) {
        return start + 1;
    }
    let mut j = start + 1;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
        j += 1;
    }
    if j >= b.len() || b[j] != b'$' || (j > start + 1 && b[start + 1].is_ascii_digit()) {
        return start + 1;
    }
    let tag = &b[start..=j];
    let mut i = j + 1;
    while i + tag.len() <= b.len() {
        if &b[i..i + tag.len()] == tag {
            return i + tag.len();
        }
        i += 1;
    }
    b.len()
}

/// `line L, column C` of a 1-based character position in `sql` (as
/// PostgreSQL reports where an error is).
pub fn line_and_column(sql: &str, position: usize) -> (usize, usize) {
    let mut line = 1;
    let mut col = 1;
    for (n, ch) in sql.chars().enumerate() {
        if n + 1 >= position {
            break;
        }
        if ch == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(sql: &str) -> (String, Vec<String>) {
        let r = named_to_positional(sql, Dialect::Postgres);
        (r.sql, r.order)
    }

    fn my(sql: &str) -> (String, Vec<String>) {
        let r = named_to_positional(sql, Dialect::MySql);
        (r.sql, r.order)
    }

    #[test]
    fn names_become_positions() {
        assert_eq!(
            pg("select * from t where a = :a and b = :b or a = :a"),
            (
                "select * from t where a = $1 and b = $2 or a = $1".into(),
                vec!["a".into(), "b".into()]
            )
        );
        assert_eq!(
            my("select * from t where a = :a and b = :b or a = :a"),
            (
                "select * from t where a = ? and b = ? or a = ?".into(),
                vec!["a".into(), "b".into(), "a".into()]
            )
        );
    }

    #[test]
    fn strings_comments_casts_and_quotes_are_left_alone() {
        let (sql, order) = pg(
            "select ':no', \":no\", x::int, $$ :no $$, $t$ :no $t$ -- :no\n\
             /* :no /* :no */ :no */ , E'\\' :no', :yes, 'it''s :no', a[1:2]",
        );
        assert_eq!(order, vec!["yes".to_string()], "{sql}");
        assert!(sql.contains(", $1,"), "{sql}");
        assert!(sql.contains("x::int"), "{sql}");
        let (sql, order) = my("select ':no \\' :no', `:no`, @v := 1 # :no\n, :yes");
        assert_eq!(order, vec!["yes".to_string()], "{sql}");
        assert!(sql.ends_with(", ?"), "{sql}");
        let r = named_to_positional("select [:no], :yes", Dialect::Sqlite);
        assert_eq!(r.order, vec!["yes".to_string()]);
    }

    #[test]
    fn positional_placeholders_stay() {
        assert_eq!(pg("select $1, $2").1, Vec::<String>::new());
        assert_eq!(pg("select $1, $2").0, "select $1, $2");
        assert_eq!(my("select ?").0, "select ?");
    }

    #[test]
    fn unterminated_text_does_not_panic() {
        for s in [
            "'", "\"", "$$", "$a$ x", "/* ", "-- ", ":", "a:", "E'\\", "`",
        ] {
            let _ = named_to_positional(s, Dialect::Postgres);
            let _ = named_to_positional(s, Dialect::MySql);
            let _ = named_to_positional(s, Dialect::Sqlite);
        }
    }

    proptest::proptest! {
        /// Any text, any dialect: no panic, and what is not a placeholder
        /// comes through unchanged (each name became one placeholder).
        #[test]
        fn any_text_is_read_without_panic(sql in "[ -~\\n\u{e9}\u{1F600}]{0,80}") {
            for d in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
                let r = named_to_positional(&sql, d);
                if r.order.is_empty() {
                    proptest::prop_assert_eq!(&r.sql, &sql);
                }
            }
        }
    }

    #[test]
    fn positions_read_as_lines() {
        assert_eq!(line_and_column("select\n  frm t", 10), (2, 3));
        assert_eq!(line_and_column("x", 1), (1, 1));
    }
}
