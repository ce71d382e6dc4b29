-- 020_node_credentials: the cluster token only registers a node; the node
-- then proves who it is with a credential of its own, issued at
-- registration, and may touch only the runs leased to it.
ALTER TABLE nodes ADD COLUMN credential_hash bytea;
COMMENT ON COLUMN nodes.credential_hash IS
    'SHA-256 of the credential issued to the process that registered this name last (the '
    'credential itself is never stored). Every cluster call after registration carries it. NULL: '
    'none is valid (the node deregistered, or registered before 020). While the node is up and '
    'heartbeats within the node timeout, a registration of its name must present this credential; '
    'once it is gone, the next registration replaces it';
-- a credential names one node: lookups go by hash
CREATE UNIQUE INDEX nodes_credential ON nodes (credential_hash) WHERE credential_hash IS NOT NULL;

CREATE TABLE run_outputs (
    job_id     uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt    integer NOT NULL,
    blob_id    text NOT NULL REFERENCES blobs (id) ON DELETE CASCADE,
    node_id    uuid NOT NULL,
    stored_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, attempt, blob_id)
);
COMMENT ON TABLE run_outputs IS
    'blobs a node stored (POST or PUT /v1/cluster/blobs?job_id=&attempt=) as outputs of a run it '
    'held, after the gateway hashed their bytes: the only blobs a report of that run may name as '
    'outputs, so that a node cannot hand a tenant a blob it never had. The rows of a job go when it '
    'succeeds (its blob references take over); those of attempts that did not succeed go with '
    'their blobs when retention sweeps them';
COMMENT ON COLUMN run_outputs.node_id IS 'the node that stored it (for the log; not a reference: nodes are never deleted)';
