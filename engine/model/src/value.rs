//! Bounds on the values a run holds. Every JSON reader (serde_json, the
//! browser's, the CLI's) stops at 128 levels of nesting, and a run's record
//! wraps its values in a few levels of its own; so a run's input and every
//! step's output are at most [`MAX_DEPTH`] levels deep, checked where they
//! enter the run, and a run is always readable back.

use serde_json::Value;

/// Deepest nesting of a value in a run (a scalar is depth 0, `[1]` depth 1).
pub const MAX_DEPTH: usize = 100;

/// Whether `v` is nested more than `limit` levels deep. It descends at most
/// `limit + 1` levels and stops at the first branch past the limit, so it
/// is safe for any value; and it allocates nothing (it runs on every run's
/// input and every step's output).
pub fn deeper_than(v: &Value, limit: usize) -> bool {
    match v {
        Value::Array(items) if !items.is_empty() => {
            limit == 0 || items.iter().any(|c| deeper_than(c, limit - 1))
        }
        Value::Object(map) if !map.is_empty() => {
            limit == 0 || map.values().any(|c| deeper_than(c, limit - 1))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(n: usize) -> Value {
        let mut v = json!(1);
        for i in 0..n {
            v = if i % 2 == 0 {
                json!([v])
            } else {
                json!({"k": v})
            };
        }
        v
    }

    #[test]
    fn depth_is_counted_in_containers() {
        assert!(!deeper_than(&json!(1), 0));
        assert!(!deeper_than(&json!([]), 0));
        assert!(deeper_than(&json!([1]), 0));
        assert!(!deeper_than(&json!([1]), 1));
        assert!(!deeper_than(&json!({"a": [], "b": {}}), 1));
        assert!(deeper_than(&json!({"a": [], "b": {"c": 2}}), 1));
        for n in [5, MAX_DEPTH, 300] {
            assert!(!deeper_than(&nested(n), n), "{n}");
            assert!(deeper_than(&nested(n), n - 1), "{n}");
        }
        // Far past the limit: it stops there, whatever lies below.
        assert!(deeper_than(&nested(1_000), MAX_DEPTH));
    }
}
