-- Peers (DESIGN §6): sharing a workflow's document with other installs.

-- A share is a capability handed out as a ticket. Only a hash of its secret
-- is kept; redeeming it binds the redeemer's key to a grant.
CREATE TABLE shares (
    id            TEXT PRIMARY KEY,
    workflow_id   TEXT NOT NULL,
    role          TEXT NOT NULL,
    secret_hash   BLOB NOT NULL,
    created_at_us INTEGER NOT NULL,
    expires_at_us INTEGER,
    uses_left     INTEGER,
    revoked_at_us INTEGER
);
CREATE INDEX shares_by_workflow ON shares (workflow_id);

-- A peer that joined a workflow through a share: known by its key from then
-- on. A removed peer stays (removed_at_us) so the shares it knew refuse it.
CREATE TABLE peer_grants (
    workflow_id   TEXT NOT NULL,
    peer          TEXT NOT NULL,
    share_id      TEXT NOT NULL,
    role          TEXT NOT NULL,
    name          TEXT NOT NULL,
    joined_at_us  INTEGER NOT NULL,
    last_seen_us  INTEGER NOT NULL,
    removed_at_us INTEGER,
    PRIMARY KEY (workflow_id, peer)
) WITHOUT ROWID;

-- A workflow this install joined from a peer: where it comes from, so the
-- link reconnects after a restart.
CREATE TABLE peer_links (
    workflow_id     TEXT PRIMARY KEY,
    ticket          TEXT NOT NULL,
    host            TEXT NOT NULL,
    host_name       TEXT NOT NULL,
    remote_workflow TEXT NOT NULL,
    role            TEXT NOT NULL,
    joined_at_us    INTEGER NOT NULL
) WITHOUT ROWID;
