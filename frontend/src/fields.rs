//! The text of config fields that are not plain text (numbers, objects,
//! arrays, templates of any type): how typed text becomes a value and a
//! value is shown as text, exactly, and where a JSON mistake is. Pure, and
//! tested natively; the form (`inspector.rs`) draws it.

use serde_json::{Value, json};

/// `$ref` to `#/$defs/…`, and `Option<T>` written as `anyOf [T, null]`.
pub fn resolve(schema: &Value, prop: &Value) -> Value {
    let deref = |p: &Value| -> Value {
        match p.get("$ref").and_then(Value::as_str) {
            Some(r) => r
                .strip_prefix("#/$defs/")
                .and_then(|name| schema["$defs"].get(name))
                .cloned()
                .unwrap_or(Value::Null),
            None => p.clone(),
        }
    };
    let mut out = deref(prop);
    if let Some(any) = prop.get("anyOf").and_then(Value::as_array)
        && let Some(inner) = any.iter().find(|a| a.get("type") != Some(&json!("null")))
    {
        out = deref(inner);
    }
    if let (Some(d), Value::Object(o)) = (prop.get("description"), &mut out) {
        o.entry("description").or_insert(d.clone());
    }
    out
}

/// The values a field may take, when its schema lists them: `enum`, or
/// `oneOf` alternatives each a `const` or an `enum` of several (schemars
/// writes documented variants as `const`s and groups the undocumented ones
/// into one `enum`, so every value of every alternative counts).
pub fn choices(prop: &Value) -> Option<Vec<String>> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let found = if prop.get("enum").is_some() {
        strings(&prop["enum"])
    } else {
        prop["oneOf"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|alt| match alt["const"].as_str() {
                Some(c) => vec![c.to_string()],
                None => strings(&alt["enum"]),
            })
            .collect()
    };
    (!found.is_empty()).then_some(found)
}

/// What a text field's text must be to become the field's value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Shape {
    /// A field of any type (a condition, a body, a template): JSON where
    /// the text is JSON (`100`, `true`, `{"a": 1}`, `"quoted"`), otherwise
    /// the text itself as a string (`{{ input.total > 100 }}`, `hello`).
    Any,
    /// A JSON object (headers, values).
    Object,
    /// A JSON array (cases).
    Array,
    /// A whole number.
    Integer,
    /// A number.
    Number,
}

impl Shape {
    /// The shape of a schema's `type` (not a string, not a boolean).
    pub fn of(ty: &Value) -> Shape {
        match ty.as_str() {
            Some("object") => Shape::Object,
            Some("array") => Shape::Array,
            Some("integer") => Shape::Integer,
            Some("number") => Shape::Number,
            _ => Shape::Any,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Shape::Any => "any",
            Shape::Object => "object",
            Shape::Array => "array",
            Shape::Integer => "integer",
            Shape::Number => "number",
        }
    }

    pub fn multiline(self) -> bool {
        matches!(self, Shape::Any | Shape::Object | Shape::Array)
    }
}

/// Why a field's text is not a value: where, and what.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SyntaxError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

/// A JSON syntax error, its position taken out of serde_json's message
/// and kept as numbers.
fn json_error(e: &serde_json::Error) -> SyntaxError {
    let text = e.to_string();
    let message = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(m, _)| m)
        .to_string();
    SyntaxError {
        line: e.line().max(1),
        column: e.column().max(1),
        message,
    }
}

/// The value a field's text stands for: `None` when the text is empty
/// (the field is removed, so its default applies).
pub fn parse(shape: Shape, text: &str) -> Result<Option<Value>, SyntaxError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    let at_start = |message: &str| SyntaxError {
        line: 1,
        column: 1,
        message: message.to_string(),
    };
    match shape {
        Shape::Integer => trimmed
            .parse::<i64>()
            .map(|n| Some(Value::from(n)))
            .map_err(|_| at_start("expected a whole number")),
        Shape::Number => trimmed
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .and_then(serde_json::Number::from_f64)
            .map(|n| {
                // `3` stays an integer, as it would in a file.
                Some(trimmed.parse::<i64>().map_or(Value::Number(n), Value::from))
            })
            .ok_or_else(|| at_start("expected a number")),
        Shape::Object | Shape::Array => {
            let v: Value = serde_json::from_str(text).map_err(|e| json_error(&e))?;
            match (shape, &v) {
                (Shape::Object, Value::Object(_)) | (Shape::Array, Value::Array(_)) => Ok(Some(v)),
                (Shape::Object, _) => {
                    Err(at_start(r#"expected an object, like {"name": "value"}"#))
                }
                _ => Err(at_start(r#"expected an array, like ["a", "b"]"#)),
            }
        }
        Shape::Any => {
            // Text that starts like JSON is held to JSON's syntax (a
            // mistake in an object is an error, not a string); a template
            // (`{{ … }}`) and plain words are strings, exactly as typed.
            let json_like = (trimmed.starts_with('{') && !trimmed.starts_with("{{"))
                || trimmed.starts_with('[')
                || trimmed.starts_with('"');
            match serde_json::from_str::<Value>(text) {
                Ok(v) => Ok(Some(v)),
                Err(e) if json_like => Err(json_error(&e)),
                Err(_) => Ok(Some(Value::String(text.to_string()))),
            }
        }
    }
}

/// The text that shows a field's value: [`parse`] gives the value back,
/// exactly (a string that would read as something else is quoted).
pub fn show(shape: Shape, v: &Value) -> String {
    match (shape, v) {
        (Shape::Any, Value::String(s)) if parse(shape, s) == Ok(Some(v.clone())) => s.clone(),
        (Shape::Integer | Shape::Number, Value::Number(n)) => n.to_string(),
        _ => serde_json::to_string_pretty(v).unwrap_or_default(),
    }
}

/// The expression that reads key `key` of the object `base` reads: a
/// key that looks like a number is still a key (`["2024"]`).
pub fn key_path(base: &str, key: &str) -> String {
    if sluice_model::template::is_identifier(key) {
        format!("{base}.{key}")
    } else {
        format!("{base}[{}]", Value::String(key.to_string()))
    }
}

/// The expression that reads `key` of what `base` reads: a key that is
/// a number is an array index (`[0]`).
pub fn child_path(base: &str, key: &str) -> String {
    if sluice_model::template::is_identifier(key) {
        format!("{base}.{key}")
    } else if let Ok(i) = key.parse::<usize>() {
        format!("{base}[{i}]")
    } else {
        format!("{base}[{}]", Value::String(key.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_of_a_schema_is_offered() {
        // http.request's `response`: two documented variants and two not.
        let spec = sluice_model::kinds::spec("http.request").unwrap();
        let schema = spec.config_schema();
        let prop = resolve(&schema, &schema["properties"]["response"]);
        assert_eq!(
            choices(&prop),
            Some(vec![
                "json".into(),
                "text".into(),
                "auto".into(),
                "bytes".into()
            ])
        );
        assert_eq!(
            choices(&serde_json::json!({"enum": ["a", "b"]})),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(choices(&serde_json::json!({"type": "string"})), None);
    }
    use serde_json::json;

    #[track_caller]
    fn round_trip(shape: Shape, v: Value) {
        let text = show(shape, &v);
        assert_eq!(parse(shape, &text), Ok(Some(v)), "shown as {text:?}");
    }

    #[test]
    fn what_is_shown_reads_back_as_the_same_value() {
        for v in [
            json!("{{ input.body.total > 100 }}"),
            json!("hello"),
            json!("100"),
            json!("true"),
            json!("null"),
            json!("\"quoted\""),
            json!("{\"a\": 1}"),
            json!("[1]"),
            json!("  padded  "),
            json!(" "),
            json!("a \\ backslash"),
            json!(100),
            json!(1.5),
            json!(true),
            json!(null),
            json!({"a": [1, "{{ input.x }}"]}),
            json!([]),
        ] {
            round_trip(Shape::Any, v);
        }
        round_trip(
            Shape::Object,
            json!({"Accept": "text/plain", "X": "{{ input.id }}"}),
        );
        round_trip(
            Shape::Array,
            json!([{"port": "big", "condition": "{{ input.n > 1 }}"}]),
        );
        round_trip(Shape::Integer, json!(-42));
        round_trip(Shape::Number, json!(2.5));
        round_trip(Shape::Number, json!(3));
    }

    #[test]
    fn tree_keys_copy_expressions_that_read_them() {
        assert_eq!(child_path("nodes.fetch", "body"), "nodes.fetch.body");
        assert_eq!(child_path("input.items", "0"), "input.items[0]");
        assert_eq!(child_path("input", "x-id"), r#"input["x-id"]"#);
        assert_eq!(child_path("input", "2fa"), r#"input["2fa"]"#);
    }

    #[test]
    fn a_template_is_shown_as_typed_without_quotes() {
        let t = "{{ input.body.total > 100 }}";
        assert_eq!(show(Shape::Any, &json!(t)), t);
        assert_eq!(parse(Shape::Any, t), Ok(Some(json!(t))));
        assert_eq!(parse(Shape::Any, "100"), Ok(Some(json!(100))));
        assert_eq!(parse(Shape::Any, ""), Ok(None));
    }

    #[test]
    fn a_json_mistake_says_where_it_is() {
        let e = parse(Shape::Object, "{\n  \"a\": 1,\n  \"b\" 2\n}").unwrap_err();
        assert_eq!((e.line, e.column), (3, 7), "{e}");
        assert!(e.message.contains("expected `:`"), "{e}");
        assert!(!e.to_string().contains(" at line "), "{e}");
        // In a field of any type, text that starts like JSON is JSON.
        let e = parse(Shape::Any, "{\"a\": 1,}").unwrap_err();
        assert_eq!((e.line, e.column), (1, 9), "{e}");
        assert_eq!(e.message, "trailing comma");
        assert!(parse(Shape::Any, "[1, 2").is_err());
        assert_eq!(
            parse(Shape::Object, "[1]").unwrap_err().message,
            r#"expected an object, like {"name": "value"}"#
        );
        assert_eq!(
            parse(Shape::Integer, "4.5").unwrap_err().message,
            "expected a whole number"
        );
        assert!(parse(Shape::Number, "4.").is_ok(), "Rust reads `4.` as 4");
        assert!(parse(Shape::Number, "1e").is_err());
        assert!(parse(Shape::Number, "NaN").is_err());
    }
}
