//! What a new workflow can start from: the templates in
//! `assets/templates` and the bundled examples in `assets/examples`.
//! Pure, tested natively (each one is a valid workflow).

use serde_json::Value;

/// A workflow to start from.
pub struct Template {
    /// Its file's id (`answer-a-webhook`).
    pub key: &'static str,
    pub name: String,
    pub description: String,
    /// The kinds of its nodes, in order (for the icons on its card).
    pub kinds: Vec<String>,
    json: Value,
}

static FILES: &[(&str, &str)] = &[
    (
        "answer-a-webhook",
        include_str!("../../assets/templates/answer-a-webhook.json"),
    ),
    (
        "check-a-site-hourly",
        include_str!("../../assets/templates/check-a-site-hourly.json"),
    ),
    (
        "transform-dropped-files",
        include_str!("../../assets/templates/transform-dropped-files.json"),
    ),
    (
        "ask-for-approval",
        include_str!("../../assets/templates/ask-for-approval.json"),
    ),
    (
        "hello",
        include_str!("../../assets/examples/hello.flow.json"),
    ),
    (
        "orders",
        include_str!("../../assets/examples/orders.flow.json"),
    ),
];

/// Every template, then every example.
pub fn all() -> Vec<Template> {
    FILES
        .iter()
        .filter_map(|(key, text)| {
            let json: Value = serde_json::from_str(text).ok()?;
            Some(Template {
                key,
                name: json["name"].as_str().unwrap_or(key).to_string(),
                description: json["description"]
                    .as_str()
                    .unwrap_or("An example workflow.")
                    .to_string(),
                kinds: json["nodes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n["kind"].as_str().map(str::to_string))
                    .collect(),
                json,
            })
        })
        .collect()
}

impl Template {
    /// The workflow to store as `id` (a new workflow: its own id, the
    /// template's name, laid out when the file has no positions).
    pub fn instantiate(&self, id: &str) -> Value {
        let mut wf = self.json.clone();
        wf["id"] = Value::String(id.to_string());
        if let Some(nodes) = wf["nodes"].as_array_mut() {
            for (i, n) in nodes.iter_mut().enumerate() {
                if n.get("position").is_none() {
                    n["position"] = serde_json::json!([i as f64 * 280.0, 0.0]);
                }
            }
        }
        wf
    }
}

/// An id for a new workflow named like `base` that no workflow in
/// `taken` has: the slug, else the slug with `-2`, `-3`…
pub fn free_id(base: &str, taken: &[&str]) -> String {
    if !taken.contains(&base) {
        return base.to_string();
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|id| !taken.contains(&id.as_str()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_is_a_valid_workflow_with_a_name_and_a_description() {
        let all = all();
        assert_eq!(all.len(), FILES.len(), "a template that does not parse");
        for t in &all {
            let wf = sluice_model::Workflow::from_value(t.instantiate("new-one"))
                .unwrap_or_else(|e| panic!("{}: {e}", t.key));
            assert_eq!(wf.id, "new-one");
            let problems = sluice_model::validate(&wf);
            assert!(problems.is_empty(), "{}: {problems:?}", t.key);
            assert!(!t.name.is_empty() && !t.description.is_empty(), "{}", t.key);
            assert!(
                wf.nodes.iter().all(|n| n.position.is_some()),
                "{}: every node placed",
                t.key
            );
        }
        assert!(
            all.iter()
                .any(|t| t.kinds.contains(&"trigger.webhook".to_string()))
        );
    }

    #[test]
    fn new_ids_never_take_an_existing_one() {
        assert_eq!(free_id("orders", &[]), "orders");
        assert_eq!(free_id("orders", &["orders"]), "orders-2");
        assert_eq!(free_id("orders", &["orders", "orders-2"]), "orders-3");
    }
}
