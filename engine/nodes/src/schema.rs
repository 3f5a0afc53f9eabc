//! JSON Schema checks (boon: drafts 4 to 2020-12), with no schema loaded
//! from anywhere but the config: a `$ref` to a file or URL is refused, so a
//! schema cannot read the machine's files or call out.

use serde_json::Value;

/// Refuses every URL: only the schema given (and the drafts' own
/// meta-schemas, built in) can be referred to.
struct NoLoader;

impl boon::UrlLoader for NoLoader {
    fn load(&self, url: &str) -> Result<Value, Box<dyn std::error::Error>> {
        Err(format!("`{url}`: schemas are not loaded from files or URLs").into())
    }
}

const LOC: &str = "urn:sluice:schema";

/// Checks `value` against `schema`; the error says where and why (the
/// schema itself may be what is wrong).
pub(crate) fn check(schema: &Value, value: &Value) -> Result<(), String> {
    let mut compiler = boon::Compiler::new();
    compiler.use_loader(Box::new(NoLoader));
    compiler
        .add_resource(LOC, schema.clone())
        .map_err(|e| format!("the schema cannot be used: {e}"))?;
    let mut schemas = boon::Schemas::new();
    let index = compiler
        .compile(LOC, &mut schemas)
        .map_err(|e| format!("the schema cannot be used: {e}"))?;
    schemas.validate(value, index).map_err(|e| {
        // `{:#}`: every cause, each at its place in the value.
        let text = format!("{e:#}");
        text.replace(&format!("{LOC}#"), "config.schema")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_checked_and_errors_say_where() {
        let schema = json!({"type": "object", "required": ["name", "age"],
            "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}});
        assert_eq!(check(&schema, &json!({"name": "Ada", "age": 36})), Ok(()));
        let e = check(&schema, &json!({"name": 5, "age": -1})).unwrap_err();
        assert!(e.contains("/name") && e.contains("/age"), "{e}");
        let e = check(&schema, &json!({"name": "Ada"})).unwrap_err();
        assert!(e.contains("age"), "{e}");
    }

    #[test]
    fn nothing_is_loaded_from_files_or_urls() {
        for r in [
            "file:///etc/passwd",
            "http://127.0.0.1:1/s.json",
            "other.json",
        ] {
            let schema = json!({"$ref": r});
            let e = check(&schema, &json!(1)).unwrap_err();
            assert!(e.starts_with("the schema cannot be used"), "{r}: {e}");
        }
    }
}
