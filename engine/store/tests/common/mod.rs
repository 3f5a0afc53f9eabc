//! What the store's test files share: a hard timeout and a store on a
//! fresh data dir.
#![allow(dead_code)]

use std::time::Duration;

use anyhow::{Context, Result};
use sluice_store::Store;
use tempfile::TempDir;

/// Every test gets a hard timeout.
pub async fn timed<F: Future<Output = Result<()>>>(f: F) -> Result<()> {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .context("test timed out")?
}

/// A store on a new data dir inside a temp dir (kept while the dir lives).
pub async fn open() -> Result<(TempDir, Store)> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("data")).await?;
    Ok((dir, store))
}
