//! The peers routes (docs/peers.md): sharing a workflow, listing and
//! revoking shares, removing a peer, joining from a ticket, and this
//! install as a peer. They answer `409` when peers are off in config.toml.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use sluice_api::{Join, Joined, NewShare, PeersInfo, ShareCreated, Shares, TicketInfo};
use sluice_peers::Peers;

use crate::{ApiError, AppState};

/// This install as a peer, started now if this is its first use.
async fn peers(s: &AppState) -> Result<&Peers, ApiError> {
    let lazy = s.options.peers.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "peers are off on this engine (config.toml [peers] enabled = false)",
        )
    })?;
    Ok(lazy.get().await?)
}

fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_value(crate::error::parse_json(bytes)?)
        .map_err(|e| ApiError::bad_request(format!("body: {e}")))
}

impl From<sluice_peers::Error> for ApiError {
    fn from(e: sluice_peers::Error) -> Self {
        if e.is_not_found() {
            ApiError::not_found(e.to_string())
        } else if e.is_refusal() {
            ApiError::bad_request(e.to_string())
        } else {
            ApiError::internal(e)
        }
    }
}

#[utoipa::path(post, path = "/api/v1/workflows/{id}/shares", tag = "peers",
    request_body(content = NewShare, content_type = "application/json"),
    responses((status = 201, description = "A new share: hand its ticket or link to the peer", body = ShareCreated),
        (status = 404, description = "No such workflow"), (status = 409, description = "Peers are off")))]
pub(crate) async fn create_share(
    State(s): State<AppState>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<(StatusCode, Json<ShareCreated>), ApiError> {
    let req: NewShare = body(&bytes)?;
    let created = peers(&s)
        .await?
        .share(&id, req.role, req.expires_in_s, req.uses)
        .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(get, path = "/api/v1/workflows/{id}/shares", tag = "peers",
    responses((status = 200, description = "The workflow's shares and the peers that joined", body = Shares),
        (status = 404, description = "No such workflow")))]
pub(crate) async fn list_shares(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Shares>, ApiError> {
    Ok(Json(peers(&s).await?.shares(&id).await?))
}

#[utoipa::path(delete, path = "/api/v1/shares/{share}", tag = "peers",
    responses((status = 204, description = "Revoked: its peers are disconnected and refused"),
        (status = 404, description = "No such share")))]
pub(crate) async fn revoke_share(
    State(s): State<AppState>,
    Path(share): Path<String>,
) -> Result<StatusCode, ApiError> {
    peers(&s).await?.revoke(&share).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/api/v1/workflows/{id}/peers/{peer}", tag = "peers",
    responses((status = 204, description = "Removed: disconnected and refused"),
        (status = 404, description = "No such peer on this workflow")))]
pub(crate) async fn remove_peer(
    State(s): State<AppState>,
    Path((id, peer)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    peers(&s).await?.remove_peer(&id, &peer).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/api/v1/peers/join", tag = "peers",
    request_body(content = Join, content_type = "application/json"),
    responses((status = 201, description = "Joined: the workflow's id here (a draft: nothing published)", body = Joined),
        (status = 400, description = "A bad ticket, a refusal, or the id is taken here")))]
pub(crate) async fn join(
    State(s): State<AppState>,
    bytes: Bytes,
) -> Result<(StatusCode, Json<Joined>), ApiError> {
    let req: Join = body(&bytes)?;
    let joined = peers(&s).await?.join(&req.ticket).await?;
    Ok((StatusCode::CREATED, Json(joined)))
}

#[utoipa::path(post, path = "/api/v1/peers/tickets", tag = "peers",
    request_body(content = Join, content_type = "application/json"),
    responses((status = 200, description = "What the ticket shares (nothing is contacted)", body = TicketInfo),
        (status = 400, description = "Not a ticket")))]
pub(crate) async fn describe_ticket(
    State(s): State<AppState>,
    bytes: Bytes,
) -> Result<Json<TicketInfo>, ApiError> {
    let req: Join = body(&bytes)?;
    Ok(Json(peers(&s).await?.describe(&req.ticket).await?))
}

#[utoipa::path(get, path = "/api/v1/peers", tag = "peers",
    responses((status = 200, description = "This install as a peer, and the workflows it joined", body = PeersInfo)))]
pub(crate) async fn info(State(s): State<AppState>) -> Result<Json<PeersInfo>, ApiError> {
    Ok(Json(match &s.options.peers {
        Some(p) => p.get().await?.info(),
        None => PeersInfo {
            enabled: false,
            id: None,
            name: s.engine.settings().user.display_name(),
            addrs: Vec::new(),
            links: Vec::new(),
        },
    }))
}
