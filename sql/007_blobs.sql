-- 007: blobs — tensor bytes with an id. The bytes live in the blob store
-- (a directory shared by the gateways); PostgreSQL records which blobs
-- exist and which tenant may read which.
CREATE TABLE blobs (
    id            text PRIMARY KEY CHECK (id ~ '^sha256:[0-9a-f]{64}$'),
    size          bigint NOT NULL CHECK (size >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE blobs IS 'content-addressed blobs whose bytes are in the blob store';
COMMENT ON COLUMN blobs.id IS '"sha256:" and the lowercase hex SHA-256 of the bytes';
COMMENT ON COLUMN blobs.last_used_at IS
    'last upload or read; a blob nobody references is removed this long after (--blob-retention-h)';

CREATE TABLE blob_refs (
    tenant_id   bigint NOT NULL REFERENCES tenants (id),
    blob_id     text NOT NULL REFERENCES blobs (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, blob_id)
);
CREATE INDEX blob_refs_blob ON blob_refs (blob_id);
COMMENT ON TABLE blob_refs IS
    'which tenant may read which blob: knowing a hash is not access; the same bytes are stored once';
