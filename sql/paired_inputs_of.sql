-- paired_inputs_of(head_rows, base_rows, p_repo, p_head, p_base): the pairing rule, step 2 —
-- head vs base per (task, sample id), from input_scores_of over the relations named by
-- head_rows (rows of commit p_head) and base_rows (rows of commit p_base) of repository p_repo.
-- The one definition of pairing: `paired_inputs` (paired_inputs_view.sql) applies it to the
-- lake's samples view for SQL users, and the comparison engine (stats.pair_task) applies it to
-- the rows of the batches it selected; statistics then consume the 'paired' rows.
-- A full outer join, so an input present in one arm only shows up with the other arm's columns
-- null. pair_status says what became of each input:
--   paired         both arms scored it and ran the same input (equal input digests, or no digest
--                  on either arm: ids without digests pair by id); delta = head - base
--   changed_input  both arms scored it but their digests differ (or one arm has none): not the
--                  same input (positional ids), counted, never paired
--   head_only      scored on head, never run on base (base_only: the reverse)
--   unscored       run on both or one arm but left without a score on an arm that ran it
create or replace macro paired_inputs_of(head_rows, base_rows, p_repo, p_head, p_base) as table
with head_inputs as (
    select
        task,
        sample_id,
        epochs,
        errored_epochs,
        unscored_epochs,
        score,
        input_digest,
        first_error,
        first_error_where
    from input_scores_of(head_rows)
    where repo = p_repo and "commit" = p_head
),

base_inputs as (
    select
        task,
        sample_id,
        epochs,
        errored_epochs,
        unscored_epochs,
        score,
        input_digest,
        first_error,
        first_error_where
    from input_scores_of(base_rows)
    where repo = p_repo and "commit" = p_base
),

joined as (
    select
        coalesce(h.task, b.task) as task,
        coalesce(h.sample_id, b.sample_id) as sample_id,
        h.score as head_score,
        b.score as base_score,
        h.input_digest is not distinct from b.input_digest and coalesce(h.input_digest, '-') != '' as same_input,
        coalesce(h.epochs, 0) as head_epochs,
        coalesce(b.epochs, 0) as base_epochs,
        coalesce(h.errored_epochs, 0) as head_errors,
        coalesce(b.errored_epochs, 0) as base_errors,
        coalesce(h.unscored_epochs, 0) as head_unscored,
        coalesce(b.unscored_epochs, 0) as base_unscored,
        h.input_digest as head_input_digest,
        b.input_digest as base_input_digest,
        h.first_error as head_first_error,
        h.first_error_where as head_first_error_where,
        b.first_error as base_first_error,
        b.first_error_where as base_first_error_where
    from head_inputs as h
    full outer join base_inputs as b
        on h.task = b.task and h.sample_id = b.sample_id
)

select
    task,
    sample_id,
    case
        when head_score is not null and base_score is not null and same_input then 'paired'
        when head_score is not null and base_score is not null then 'changed_input'
        when head_score is not null and base_epochs = 0 then 'head_only'
        when base_score is not null and head_epochs = 0 then 'base_only'
        else 'unscored'
    end as pair_status,
    head_score,
    base_score,
    case when head_score is not null and base_score is not null and same_input then head_score - base_score end
        as delta,
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
from joined
