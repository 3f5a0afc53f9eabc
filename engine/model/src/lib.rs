//! The Sluice workflow model: the `sluice.workflow/v1` file format, the catalog
//! of node kinds with their config schemas and ports, static graph analysis,
//! validation and the template language.
//!
//! Architecture invariant: this crate does no I/O and builds for
//! `wasm32-unknown-unknown`; the editor and the engine share it.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod credentials;
pub mod doc;
pub mod graph;
pub mod kinds;
pub mod n8n;
pub mod preview;
pub mod template;
pub mod validate;
pub mod value;
pub mod workflow;

pub use graph::Graph;
pub use kinds::{KindSpec, catalog};
pub use validate::{Problem, validate};
pub use workflow::{
    Edge, Endpoint, FORMAT, Node, OnError, ParseError, RetryPolicy, Settings, Workflow,
};
