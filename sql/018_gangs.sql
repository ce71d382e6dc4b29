-- 018_gangs: jobs that span nodes (resources.nodes) and runs placed on
-- chosen GPUs. A single-node job keeps living in its jobs row alone (its
-- GPUs in gpu_ids); a multi-node job has one job_ranks row per node of
-- each attempt, node_rank 0's node also in jobs.node_id / node_name.
ALTER TABLE jobs ADD COLUMN nodes int NOT NULL DEFAULT 1 CHECK (nodes BETWEEN 1 AND 64);
ALTER TABLE jobs ADD COLUMN gpu_memory_gb real CHECK (gpu_memory_gb > 0);
ALTER TABLE jobs ADD COLUMN gpu_ids int[];
COMMENT ON COLUMN jobs.nodes IS 'resources.nodes: nodes the job spans; gpus is per node';
COMMENT ON COLUMN jobs.gpu_memory_gb IS 'resources.gpu_memory_gb: least memory of each GPU the job gets';
COMMENT ON COLUMN jobs.gpu_ids IS 'the device indices the scheduler gave a single-node run (NULL: the node chose)';

CREATE TABLE job_ranks (
    job_id uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt int NOT NULL,
    node_rank int NOT NULL,
    node_id uuid NOT NULL REFERENCES nodes (id),
    node_name text NOT NULL,
    gpu_ids int[] NOT NULL DEFAULT '{}',
    leased_at timestamptz,
    cancel_sent boolean NOT NULL DEFAULT false,
    ended_at timestamptz,
    state text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    PRIMARY KEY (job_id, attempt, node_rank)
);
COMMENT ON TABLE job_ranks IS 'one row per node of each attempt of a multi-node job: where its ranks ran and how that part ended';
-- a node's poll looks for its parts not yet taken, and its running parts
CREATE INDEX job_ranks_node_open ON job_ranks (node_id) WHERE ended_at IS NULL;

-- kowloon_placement: in sql/objects.sql now, re-applied at every start.

-- kowloon_job_json: in sql/objects.sql now, re-applied at every start.
