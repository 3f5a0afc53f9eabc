//! Credentials as the editor's Credentials page sees them: where each is
//! used, and a test of one against the server it is for. The test is one
//! node of the kind that uses the credential, run detached (like "Run this
//! node": nothing journaled) on a config made for the check, so it goes
//! through the same clients, network policy and secret masking as a run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_api::{CredentialTested, CredentialUse};
use sluice_model::Workflow;
use sluice_model::template::Scope;
use sluice_nodes as nodes;

use super::step::Prepared;
use super::{Engine, Error, Result, new_run_id};
use crate::plan::Plan;

/// The longest a credential test may take.
const TEST_LIMIT: Duration = Duration::from_secs(30);

impl Engine {
    /// Every node that names a credential, by credential name: in the
    /// drafts (what the editor shows, as last stored from its document) and
    /// the published versions (what runs). A stored workflow that does not
    /// parse is skipped. One read of the workflows table.
    pub async fn credential_uses(&self) -> Result<BTreeMap<String, Vec<CredentialUse>>> {
        let mut uses: BTreeMap<String, Vec<CredentialUse>> = BTreeMap::new();
        for (id, draft, published) in self.store().workflow_texts().await? {
            let mut found: BTreeMap<(String, String), CredentialUse> = BTreeMap::new();
            for (text, is_draft) in [(Some(draft), true), (published, false)] {
                let Some(wf) = text.and_then(|t| Workflow::from_json(&t).ok()) else {
                    continue;
                };
                for (node, name, _) in sluice_model::validate::credential_refs(&wf) {
                    let kind = wf
                        .nodes
                        .iter()
                        .find(|n| n.id == node)
                        .map(|n| n.kind.clone())
                        .unwrap_or_default();
                    let entry = found
                        .entry((name.to_string(), node.to_string()))
                        .or_insert_with(|| CredentialUse {
                            workflow: id.clone(),
                            node: node.to_string(),
                            kind,
                            draft: false,
                            published: false,
                        });
                    if is_draft {
                        entry.draft = true;
                    } else {
                        entry.published = true;
                    }
                }
            }
            for ((name, _), u) in found {
                uses.entry(name).or_default().push(u);
            }
        }
        Ok(uses)
    }

    /// Tests credential `name` with one kind-specific exchange: an HTTP
    /// `GET` of `url` for `bearer`, `basic`, `header` and `query` (default:
    /// the written-out URL of an `http.request` node that uses it in a
    /// published workflow: never a draft's, which a peer may have written,
    /// so a secret never goes where only a peer said), an SMTP
    /// handshake and login for `smtp`, `SELECT 1` for `postgres` and
    /// `mysql`, the model list for `openai`. A server that refuses is an
    /// answer (`ok: false` and what it said), not an error.
    pub async fn test_credential(
        &self,
        name: &str,
        url: Option<String>,
    ) -> Result<CredentialTested> {
        let kind = self
            .store()
            .list_credentials()
            .await?
            .into_iter()
            .find(|c| c.name == name)
            .map(|c| c.kind)
            .ok_or_else(|| Error::CredentialNotFound(name.to_string()))?;
        let (node_kind, config) = match kind.as_str() {
            "bearer" | "basic" | "header" | "query" => {
                let url = match url.filter(|u| !u.trim().is_empty()) {
                    Some(u) => u,
                    None => self.url_using(name).await?.ok_or_else(|| {
                        Error::CredentialTest(format!(
                            "credential `{name}`: give a URL to call with it (no published \
                             http.request node that uses it has one written out)"
                        ))
                    })?,
                };
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(Error::CredentialTest(format!(
                        "url: `{}` must start with http:// or https://",
                        url.chars().take(200).collect::<String>()
                    )));
                }
                (
                    "http.request",
                    // The body is read (up to the engine's limit) and dropped.
                    json!({"method": "GET", "url": url, "credential": name,
                           "fail_on_status": true, "response": "text",
                           "idempotency_key": false}),
                )
            }
            // Validation asks an email for its recipients; none is written to.
            "smtp" => (
                "email.send",
                json!({"credential": name, "to": "test@example.invalid", "text": "-"}),
            ),
            "openai" => (
                "ai.chat",
                json!({"credential": name, "model": "-", "user": "-"}),
            ),
            "postgres" | "mysql" => ("db.query", json!({"credential": name, "sql": "SELECT 1"})),
            other => {
                return Err(Error::CredentialTest(format!(
                    "credential `{name}`: a `{other}` credential has no test"
                )));
            }
        };
        let wf = Workflow::from_value(json!({
            "format": "sluice.workflow/v1",
            "id": "credential-test",
            "name": "Credential test",
            "nodes": [
                {"id": "start", "kind": "trigger.manual", "config": {}},
                {"id": "test", "kind": node_kind, "config": config},
            ],
            "edges": [{"from": "start", "to": "test"}],
        }))
        .map_err(|e| Error::CredentialTest(format!("credential `{name}`: {e}")))?;
        let plan = Plan::build(wf, None, true)?;
        let index = plan
            .node_index("test")
            .ok_or_else(|| Error::CredentialTest("the test node is missing".to_string()))?;
        let test_id = format!("test-{}", new_run_id());
        let started_at_us = nodes::now_us();
        let scope = Scope {
            input: Arc::new(Value::Object(Default::default())),
            nodes: Arc::new(sluice_model::preview::RunOutputs::default()),
            run: Arc::new(sluice_model::preview::run_info(
                &test_id,
                &plan.workflow.id,
                "start",
                started_at_us,
            )),
            vars: plan.vars.clone(),
        };
        let step = Prepared::detached(self, plan.clone(), format!("{test_id}/test"), scope);
        let pn = &plan.nodes[index];
        // The wait for a step permit counts in the limit: a busy engine
        // answers in time all the same.
        let checked = async {
            let _permit = self.inner.permits.clone().acquire_owned().await.ok();
            nodes::check_credential(step.call(pn, started_at_us)).await
        };
        let result = match tokio::time::timeout(TEST_LIMIT, checked).await {
            Ok(r) => r,
            Err(_) => Err(nodes::Error::retryable(format!(
                "no answer within {} s",
                TEST_LIMIT.as_secs()
            ))),
        };
        let started = step.started;
        // The result through the step's masking: a server may echo a secret.
        let (masked, _) = step
            .finish(result.map(|text| vec![("out".to_string(), Arc::new(Value::String(text)))]));
        let duration_us = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
        let (ok, message) = match masked {
            Ok(outputs) => (
                true,
                outputs
                    .first()
                    .and_then(|(_, m)| m.as_str().map(str::to_string))
                    .unwrap_or_default(),
            ),
            Err(e) => (false, e.message),
        };
        Ok(CredentialTested {
            name: name.to_string(),
            kind,
            ok,
            message,
            duration_us,
        })
    }

    /// The URL of an `http.request` node that uses credential `name` in a
    /// published workflow, when it is written out (no template).
    async fn url_using(&self, name: &str) -> Result<Option<String>> {
        for (_, _, published) in self.store().workflow_texts().await? {
            let Some(wf) = published.and_then(|t| Workflow::from_json(&t).ok()) else {
                continue;
            };
            for (node, cred, _) in sluice_model::validate::credential_refs(&wf) {
                if cred != name {
                    continue;
                }
                let url = wf
                    .nodes
                    .iter()
                    .find(|n| n.id == node && n.kind == "http.request")
                    .and_then(|n| n.config.get("url")?.as_str().map(str::to_string));
                if let Some(url) = url.filter(|u| !u.contains("{{") && !u.contains("{%")) {
                    return Ok(Some(url));
                }
            }
        }
        Ok(None)
    }
}
