//! The Sluice editor: a Yew app in the browser, served by `sluice serve` at
//! `/`. It holds its own Loro document per open workflow (the model crate's
//! `WorkflowDoc`) and syncs it with the engine over the WebSocket, so edits
//! show at once and merge with other windows.
//!
//! - [`state`]: the editor's state and reducers, pure and tested natively.
//! - [`fields`]: config fields typed as text (JSON, numbers, templates),
//!   pure and tested natively.
//! - [`review`]: what publishing a draft would change, per node and
//!   field, code as a line diff; pure, tested natively.
//! - [`icons`]: the node kinds' icons (assets/node-icons), pure.
//! - [`runs_query`]: the runs page's filters as its URL and the API's query, pure.
//! - [`templates`]: the templates and examples a workflow starts from, pure.
//! - [`text`]: field names as labels and inline Markdown as spans, pure.
//! - [`sync`]: the workflow's document and presence as the canvas syncs
//!   them, pure and tested natively.
//! - `app`, `canvas`, `scene`, `inspector`, `net`: the browser side
//!   (wasm32 only).

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod data_view;
pub mod fields;
pub mod icons;
pub mod log_filter;
pub mod review;
pub mod route;
pub mod runs_query;
pub mod state;
pub mod sync;
pub mod templates;
pub mod text;

#[cfg(target_arch = "wasm32")]
mod app;
#[cfg(target_arch = "wasm32")]
mod canvas;
#[cfg(target_arch = "wasm32")]
mod credentials;
#[cfg(target_arch = "wasm32")]
mod inspector;
#[cfg(target_arch = "wasm32")]
mod looks;
#[cfg(target_arch = "wasm32")]
mod net;
#[cfg(target_arch = "wasm32")]
mod runs_page;
#[cfg(target_arch = "wasm32")]
mod scene;

/// Starts the app in the page's `<body>`.
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen(start)]
pub fn start() {
    yew::Renderer::<app::App>::new().render();
}
