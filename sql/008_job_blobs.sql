-- 008: jobs whose tensors are blobs. Inputs and outputs are named in
-- job_inputs.meta / job_results.meta as {"name","dtype","shape","blob",
-- "nbytes"} with no bytes in the row (data is empty); rows written before
-- this migration keep {"offset", "nbytes"} into their bytea, and both forms
-- are read.
CREATE TABLE job_blob_refs (
    job_id   uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    blob_id  text NOT NULL REFERENCES blobs (id),
    PRIMARY KEY (job_id, blob_id)
);
CREATE INDEX job_blob_refs_blob ON job_blob_refs (blob_id);
COMMENT ON TABLE job_blob_refs IS
    'blobs a job reads or wrote: retention keeps a blob while any job or tenant references it';
COMMENT ON COLUMN job_inputs.meta IS
    'per input: name, dtype, shape, and blob + nbytes (its bytes in the blob store), or offset + nbytes into data (before 008)';
COMMENT ON COLUMN job_results.meta IS
    'per output: name, dtype, shape, and blob + nbytes, or offset + nbytes into data (before 008)';
