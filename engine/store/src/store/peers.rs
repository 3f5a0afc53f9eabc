//! Shares, the peers that joined through them, and the workflows this
//! install joined from peers (migration 0008). Only a hash of a share's
//! secret is stored; a redemption is checked and counted in one
//! transaction, so a ticket with one use admits one peer however many try
//! at once.

use super::Store;
use crate::Result;

crate::from_row! {
    /// A share as stored (never its secret).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ShareRow {
        pub id: String,
        pub workflow_id: String,
        pub role: String,
        pub created_at_us: i64,
        pub expires_at_us: Option<i64>,
        /// Redemptions left (None: any number).
        pub uses_left: Option<i64>,
        pub revoked_at_us: Option<i64>,
    }
}

crate::from_row! {
    /// A peer that joined a workflow.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GrantRow {
        pub workflow_id: String,
        pub peer: String,
        pub share_id: String,
        pub role: String,
        pub name: String,
        pub joined_at_us: i64,
        pub last_seen_us: i64,
        pub removed_at_us: Option<i64>,
    }
}

crate::from_row! {
    /// A workflow joined from a peer.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LinkRow {
        pub workflow_id: String,
        pub ticket: String,
        pub host: String,
        pub host_name: String,
        pub remote_workflow: String,
        pub role: String,
        pub joined_at_us: i64,
    }
}

/// A new share.
#[derive(Debug, Clone)]
pub struct NewShare<'a> {
    pub id: &'a str,
    pub workflow_id: &'a str,
    pub role: &'a str,
    /// blake3 of the secret.
    pub secret_hash: [u8; 32],
    pub created_at_us: i64,
    pub expires_at_us: Option<i64>,
    pub uses: Option<i64>,
}

/// A peer asking to join with a share's secret.
#[derive(Debug, Clone)]
pub struct Redeem<'a> {
    pub workflow_id: &'a str,
    pub share_id: &'a str,
    pub secret: &'a [u8],
    pub peer: &'a str,
    pub name: &'a str,
    pub at_us: i64,
}

/// Why a peer is not let in. The messages are what the peer is told: they
/// name the share, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no such share for this workflow, or a wrong secret")]
    Unknown,
    #[error("this share was revoked")]
    Revoked,
    #[error("this share has expired")]
    Expired,
    #[error("this share has been used up")]
    UsedUp,
    #[error("this peer was removed from the workflow")]
    Removed,
}

impl Store {
    /// Stores a new share.
    pub async fn create_share(&self, s: &NewShare<'_>) -> Result<()> {
        sqlx::query(
            "INSERT INTO shares (id, workflow_id, role, secret_hash, created_at_us, \
             expires_at_us, uses_left) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(s.id)
        .bind(s.workflow_id)
        .bind(s.role)
        .bind(&s.secret_hash[..])
        .bind(s.created_at_us)
        .bind(s.expires_at_us)
        .bind(s.uses)
        .execute(&self.inner.pool)
        .await?;
        Ok(())
    }

    /// The shares of workflow `id`, oldest first.
    pub async fn list_shares(&self, id: &str) -> Result<Vec<ShareRow>> {
        Ok(sqlx::query_as(
            "SELECT id, workflow_id, role, created_at_us, expires_at_us, uses_left, \
             revoked_at_us FROM shares WHERE workflow_id = ? ORDER BY created_at_us, id",
        )
        .bind(id)
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// One share.
    pub async fn get_share(&self, share: &str) -> Result<Option<ShareRow>> {
        Ok(sqlx::query_as(
            "SELECT id, workflow_id, role, created_at_us, expires_at_us, uses_left, \
             revoked_at_us FROM shares WHERE id = ?",
        )
        .bind(share)
        .fetch_optional(&self.inner.pool)
        .await?)
    }

    /// Revokes a share (and so every peer that joined through it). Returns
    /// the share as it was, None when there is no such share.
    pub async fn revoke_share(&self, share: &str, at_us: i64) -> Result<Option<ShareRow>> {
        let row = self.get_share(share).await?;
        if row.is_some() {
            sqlx::query(
                "UPDATE shares SET revoked_at_us = COALESCE(revoked_at_us, ?) WHERE id = ?",
            )
            .bind(at_us)
            .bind(share)
            .execute(&self.inner.pool)
            .await?;
        }
        Ok(row)
    }

    /// The peers that joined workflow `id` (removed ones too), by join time.
    pub async fn list_grants(&self, id: &str) -> Result<Vec<GrantRow>> {
        Ok(sqlx::query_as(
            "SELECT workflow_id, peer, share_id, role, name, joined_at_us, last_seen_us, \
             removed_at_us FROM peer_grants WHERE workflow_id = ? ORDER BY joined_at_us, peer",
        )
        .bind(id)
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Removes peer `peer` from workflow `id`. Returns whether it was a
    /// member.
    pub async fn remove_peer(&self, id: &str, peer: &str, at_us: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE peer_grants SET removed_at_us = ? WHERE workflow_id = ? AND peer = ? \
             AND removed_at_us IS NULL",
        )
        .bind(at_us)
        .bind(id)
        .bind(peer)
        .execute(&self.inner.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The role peer `peer` holds on workflow `id`, if it joined before and
    /// neither it nor its share was revoked.
    pub async fn peer_role(&self, id: &str, peer: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT g.role FROM peer_grants g JOIN shares s ON s.id = g.share_id \
             WHERE g.workflow_id = ? AND g.peer = ? AND g.removed_at_us IS NULL \
             AND s.revoked_at_us IS NULL",
        )
        .bind(id)
        .bind(peer)
        .fetch_optional(&self.inner.pool)
        .await?)
    }

    /// Notes that a joined peer was connected (and its current name).
    pub async fn touch_peer(&self, id: &str, peer: &str, name: &str, at_us: i64) -> Result<()> {
        sqlx::query(
            "UPDATE peer_grants SET last_seen_us = ?, name = ? WHERE workflow_id = ? AND peer = ?",
        )
        .bind(at_us)
        .bind(name)
        .bind(id)
        .bind(peer)
        .execute(&self.inner.pool)
        .await?;
        Ok(())
    }

    /// Lets a peer in with a share's secret: checks the share (its secret
    /// by hash, in constant time; not revoked, expired or used up), counts
    /// the use and records the grant, in one transaction. A peer that
    /// already holds a grant through this share is let in again without
    /// spending a use. Answers the role granted.
    pub async fn redeem_share(
        &self,
        r: &Redeem<'_>,
    ) -> Result<std::result::Result<String, Refusal>> {
        crate::from_row! {
            struct Found {
                role: String,
                secret_hash: Vec<u8>,
                created_at_us: i64,
                expires_at_us: Option<i64>,
                uses_left: Option<i64>,
                revoked_at_us: Option<i64>,
            }
        }
        crate::from_row! {
            struct Grant {
                share_id: String,
                removed_at_us: Option<i64>,
            }
        }
        let mut tx = self.inner.pool.begin().await?;
        // Writing first takes SQLite's write lock: two redemptions of the
        // last use cannot both read it as left.
        sqlx::query("UPDATE shares SET uses_left = uses_left WHERE id = ?")
            .bind(r.share_id)
            .execute(&mut *tx)
            .await?;
        let found: Option<Found> = sqlx::query_as(
            "SELECT role, secret_hash, created_at_us, expires_at_us, uses_left, revoked_at_us \
             FROM shares WHERE id = ? AND workflow_id = ?",
        )
        .bind(r.share_id)
        .bind(r.workflow_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(share) = found else {
            return Ok(Err(Refusal::Unknown));
        };
        let stored = <[u8; 32]>::try_from(share.secret_hash.as_slice()).ok();
        // blake3::Hash compares in constant time.
        if stored.map(blake3::Hash::from_bytes) != Some(blake3::hash(r.secret)) {
            return Ok(Err(Refusal::Unknown));
        }
        if share.revoked_at_us.is_some() {
            return Ok(Err(Refusal::Revoked));
        }
        let grant: Option<Grant> = sqlx::query_as(
            "SELECT share_id, removed_at_us FROM peer_grants WHERE workflow_id = ? AND peer = ?",
        )
        .bind(r.workflow_id)
        .bind(r.peer)
        .fetch_optional(&mut *tx)
        .await?;
        match &grant {
            // Removed: only a share made after the removal lets it back.
            Some(Grant {
                removed_at_us: Some(removed),
                ..
            }) if share.created_at_us <= *removed => return Ok(Err(Refusal::Removed)),
            Some(Grant {
                share_id,
                removed_at_us: None,
            }) if share_id == r.share_id => {
                tx.commit().await?;
                return Ok(Ok(share.role));
            }
            _ => {}
        }
        if share.expires_at_us.is_some_and(|e| r.at_us >= e) {
            return Ok(Err(Refusal::Expired));
        }
        if share.uses_left.is_some_and(|u| u <= 0) {
            return Ok(Err(Refusal::UsedUp));
        }
        sqlx::query(
            "UPDATE shares SET uses_left = uses_left - 1 WHERE id = ? AND uses_left IS NOT NULL",
        )
        .bind(r.share_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO peer_grants (workflow_id, peer, share_id, role, name, joined_at_us, \
             last_seen_us) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workflow_id, peer) DO UPDATE \
             SET share_id = excluded.share_id, role = excluded.role, name = excluded.name, \
             joined_at_us = excluded.joined_at_us, last_seen_us = excluded.last_seen_us, \
             removed_at_us = NULL",
        )
        .bind(r.workflow_id)
        .bind(r.peer)
        .bind(r.share_id)
        .bind(&share.role)
        .bind(r.name)
        .bind(r.at_us)
        .bind(r.at_us)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(share.role))
    }

    /// Records (or replaces) a workflow joined from a peer.
    pub async fn put_link(&self, l: &LinkRow) -> Result<()> {
        sqlx::query(
            "INSERT OR REPLACE INTO peer_links (workflow_id, ticket, host, host_name, \
             remote_workflow, role, joined_at_us) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&l.workflow_id)
        .bind(&l.ticket)
        .bind(&l.host)
        .bind(&l.host_name)
        .bind(&l.remote_workflow)
        .bind(&l.role)
        .bind(l.joined_at_us)
        .execute(&self.inner.pool)
        .await?;
        Ok(())
    }

    /// Every workflow joined from a peer.
    pub async fn list_links(&self) -> Result<Vec<LinkRow>> {
        Ok(sqlx::query_as(
            "SELECT workflow_id, ticket, host, host_name, remote_workflow, role, joined_at_us \
             FROM peer_links ORDER BY workflow_id",
        )
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// The id the document of workflow `id` holds, when it was joined from
    /// a peer under another id (its id there was taken here).
    pub async fn doc_alias(&self, id: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT remote_workflow FROM peer_links WHERE workflow_id = ? \
             AND remote_workflow != workflow_id",
        )
        .bind(id)
        .fetch_optional(&self.inner.pool)
        .await?)
    }

    /// Whether a peer may come back for something of this install: a share
    /// not revoked, a peer that joined and was not removed, or a workflow
    /// joined from a peer (the endpoint must be up for them).
    pub async fn has_peer_state(&self) -> Result<bool> {
        Ok(sqlx::query_scalar::<_, i64>(
            "SELECT EXISTS (SELECT 1 FROM shares WHERE revoked_at_us IS NULL) \
             OR EXISTS (SELECT 1 FROM peer_grants WHERE removed_at_us IS NULL) \
             OR EXISTS (SELECT 1 FROM peer_links)",
        )
        .fetch_one(&self.inner.pool)
        .await?
            != 0)
    }

    /// Whether workflow `id` is linked to a peer (joined from it).
    pub async fn has_link(&self, id: &str) -> Result<bool> {
        Ok(
            sqlx::query_scalar::<_, i64>("SELECT 1 FROM peer_links WHERE workflow_id = ?")
                .bind(id)
                .fetch_optional(&self.inner.pool)
                .await?
                .is_some(),
        )
    }

    /// Forgets a joined workflow's link. Returns whether there was one.
    pub async fn delete_link(&self, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM peer_links WHERE workflow_id = ?")
            .bind(id)
            .execute(&self.inner.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Workflow `id`'s versions not yet published that came from peers
    /// (their origin message starts with `peer `), oldest first: what a
    /// user reviews before publishing, and what keeps a workflow from
    /// publishing by itself.
    pub async fn unpublished_peer_versions(&self, id: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT message FROM doc_versions WHERE workflow_id = ? AND message LIKE 'peer %' \
             AND seq > COALESCE((SELECT MAX(seq) FROM doc_versions WHERE workflow_id = ? \
             AND published_at_us IS NOT NULL), 0) ORDER BY seq",
        )
        .bind(id)
        .bind(id)
        .fetch_all(&self.inner.pool)
        .await?)
    }
}
