//! `/openapi.json`: the OpenAPI document, generated from the handlers'
//! annotations (utoipa), served without a token (it describes, it reveals nothing).

use axum::Json;
use axum::response::IntoResponse;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(title = "Sluice", description = "The Sluice trigger port: webhooks and the REST API (see docs/api.md)."),
    paths(
        crate::api::health,
        crate::api::me,
        crate::api::node_kinds,
        crate::api::list_workflows,
        crate::api::get_workflow,
        crate::api::put_workflow,
        crate::api::validate_workflow,
        crate::api::import_n8n,
        crate::api::delete_workflow,
        crate::api::publish_state,
        crate::api::publish_workflow,
        crate::api::unpublish_workflow,
        crate::api::deploy_state,
        crate::api::deploy_workflow,
        crate::api::undeploy_workflow,
        crate::api::list_versions,
        crate::api::get_version,
        crate::api::restore_version,
        crate::api::run_workflow,
        crate::api::add_module,
        crate::api::start_run,
        crate::api::list_runs,
        crate::api::get_run,
        crate::api::cancel_run,
        crate::api::retry_run,
        crate::resume::signal_run,
        crate::resume::resume_page,
        crate::resume::resume,
        crate::api::run_logs,
        crate::api::metrics,
        crate::api::list_credentials,
        crate::api::create_credential,
        crate::api::patch_credential,
        crate::api::test_credential,
        crate::api::put_credential,
        crate::api::delete_credential,
        crate::ui::new_sign_in_link,
        crate::peers::create_share,
        crate::peers::list_shares,
        crate::peers::revoke_share,
        crate::peers::remove_peer,
        crate::peers::join,
        crate::peers::describe_ticket,
        crate::peers::info,
        crate::api::worker_health,
        crate::api::storage,
        crate::api::prune,
        crate::api::test_node,
        crate::api::listen_for_test_call,
        crate::hook::test_hook,
        crate::live::ws,
        crate::hook::hook,
    ),
    modifiers(&BearerToken),
    security(("token" = [])),
    tags(
        (name = "workflows", description = "Stored workflows"),
        (name = "runs", description = "Runs, their steps, logs and live events"),
        (name = "webhooks", description = "The only routes without a token"),
        (name = "engine", description = "Health, node kinds, metrics, sign-in links for the editor"),
        (name = "credentials", description = "Secrets by name, encrypted at rest; values are write-only"),
        (name = "peers", description = "Sharing workflows with other installs over iroh (docs/peers.md)"),
    )
)]
pub(crate) struct ApiDoc;

struct BearerToken;

impl utoipa::Modify for BearerToken {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The token in <data-dir>/api-token"))
                    .build(),
            ),
        );
    }
}

pub(crate) async fn document() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}
