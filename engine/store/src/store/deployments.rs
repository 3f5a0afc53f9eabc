//! Workflows deployed to the shared worker (migration 0010): the version
//! the worker owns, and how far the deployment's run log has been read.

use super::Store;
use crate::Result;

crate::from_row! {
    /// A workflow's deployment as this engine knows it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeploymentRow {
        pub workflow_id: String,
        /// The version the worker owns (None: undeployed, its log still read).
        pub version: Option<String>,
        pub deployed_at_us: Option<i64>,
        /// How many entries of the deployment's run log were adopted.
        pub log_read: i64,
    }
}

impl Store {
    /// Records that the worker owns `version` of `workflow` (None: undeployed).
    pub async fn set_deployment(
        &self,
        workflow: &str,
        version: Option<&str>,
        at_us: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO deployments (workflow_id, version, deployed_at_us) VALUES (?, ?, ?) \
             ON CONFLICT (workflow_id) DO UPDATE SET version = excluded.version, \
             deployed_at_us = excluded.deployed_at_us",
        )
        .bind(workflow)
        .bind(version)
        .bind(version.map(|_| at_us))
        .execute(&self.inner.pool)
        .await?;
        Ok(())
    }

    /// The deployment of `workflow`, if it ever had one.
    pub async fn deployment(&self, workflow: &str) -> Result<Option<DeploymentRow>> {
        Ok(sqlx::query_as(
            "SELECT workflow_id, version, deployed_at_us, log_read FROM deployments \
             WHERE workflow_id = ?",
        )
        .bind(workflow)
        .fetch_optional(&self.inner.pool)
        .await?)
    }

    /// Every deployment this engine follows.
    pub async fn deployments(&self) -> Result<Vec<DeploymentRow>> {
        Ok(sqlx::query_as(
            "SELECT workflow_id, version, deployed_at_us, log_read FROM deployments \
             ORDER BY workflow_id",
        )
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Moves the read position of `workflow`'s run log forward (never back).
    pub async fn set_deployment_read(&self, workflow: &str, log_read: i64) -> Result<()> {
        sqlx::query("UPDATE deployments SET log_read = MAX(log_read, ?) WHERE workflow_id = ?")
            .bind(log_read)
            .bind(workflow)
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }

    /// Stops following an undeployed workflow's log.
    pub async fn forget_deployment(&self, workflow: &str) -> Result<()> {
        sqlx::query("DELETE FROM deployments WHERE workflow_id = ? AND version IS NULL")
            .bind(workflow)
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }
}
