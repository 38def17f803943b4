-- input_scores_of(sample_rows): the pairing rule, step 1 — one row per (repo, commit, task,
-- sample id) of the relation named by sample_rows (a table or view with the samples view's
-- repo, commit, task, sample_id, epoch, score, error, error_where and input_digest columns).
-- The input is the unit, so each input's epochs are reduced to one score first:
--   * an errored epoch (error set: the sample raised in the repository's code) scores 0;
--   * an input with an epoch neither scored nor errored (e.g. a scorer value outside [0, 1])
--     has no score: averaging only its other epochs would weight inputs unequally;
--   * input_digest is the digest its epochs share, '' when they disagree (matches nothing).
-- The lake's input_scores view applies it to every committed row; the comparison engine
-- applies it to the rows of the batches it selected (see paired_inputs_of.sql).
create or replace macro input_scores_of(sample_rows) as table
with epochs as (
    select
        repo,
        "commit",
        task,
        sample_id,
        epoch,
        score,
        coalesce(error, '') != '' as errored,
        error,
        error_where,
        input_digest
    from query_table(sample_rows)
)

select
    repo,
    "commit",
    task,
    sample_id,
    count(*) as epochs,
    count(*) filter (where errored) as errored_epochs,
    count(*) filter (where not errored and score is null) as unscored_epochs,
    case when count(*) filter (where not errored and score is null) = 0
        then avg(case when errored then 0.0 else score end) end as score,
    case when min(coalesce(input_digest, '')) = max(coalesce(input_digest, '')) then max(input_digest) else '' end
        as input_digest,
    -- what the first errored epoch raised, and where
    arg_min_null(error, epoch) filter (where errored) as first_error,
    arg_min_null(error_where, epoch) filter (where errored) as first_error_where
from epochs
group by repo, "commit", task, sample_id
