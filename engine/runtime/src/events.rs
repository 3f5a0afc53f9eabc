//! Live events: what runs are doing, as it happens, for the WebSocket and the
//! editor. Published on a bounded broadcast channel: a subscriber that falls
//! behind loses events (and is told so), the engine never waits for it.

/// The event types are the wire protocol's (`sluice_api::events`): the
/// WebSocket sends them as they are, and the editor reads them with the same types.
pub use sluice_api::events::{LiveEvent, What};

/// How many events a slow subscriber may fall behind before it lags.
pub const CAPACITY: usize = 4096;
