-- 016_inline_small_tensors: a result or input of a few KiB stays in its
-- row. Past 2 KiB PostgreSQL moves a value out to the TOAST table in 2 KiB
-- chunks, each a row and an index entry of its own: for a small job that
-- was most of what recording its result cost. A row up to a page now stays
-- whole; larger values still go out of line (uncompressed: STORAGE
-- EXTERNAL, 010).
ALTER TABLE job_results SET (toast_tuple_target = 8160);
ALTER TABLE job_inputs SET (toast_tuple_target = 8160);
