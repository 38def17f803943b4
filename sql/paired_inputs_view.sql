-- paired_inputs(p_repo, p_head, p_base): a parameterised view — the pairing rule
-- (paired_inputs_of.sql) over the lake's samples view, every committed row of the two commits:
--   select * from paired_inputs('owner/repo', '<head sha>', '<base sha>') where pair_status = 'paired'
-- The engine applies the same rule to the rows of the batches a comparison selected (its
-- model, seed, epochs and runtime); restrict samples to those batches (a comparison document
-- lists them per task under "batches") to get exactly its pairs.
create or replace macro paired_inputs(p_repo, p_head, p_base) as table
select
    task,
    sample_id,
    pair_status,
    head_score,
    base_score,
    delta,
    same_input,
    head_epochs,
    base_epochs,
    head_errors,
    base_errors,
    head_unscored,
    base_unscored,
    head_input_digest,
    base_input_digest,
    head_first_error,
    head_first_error_where,
    base_first_error,
    base_first_error_where
from paired_inputs_of('samples', 'samples', p_repo, p_head, p_base)
