-- paired_samples: head vs base per (task, sample id), each arm's epochs averaged per input first.
-- Parameters: $repo, $head (commit), $base (commit). A full outer join, so an input present in
-- one arm only shows up with the other arm's columns null. The pairing rule of
-- evalrunner_assets/stats/_pairing.py: an errored epoch (the sample raised in the repository's
-- code) scores 0; an input with an epoch neither scored nor errored has no score; an input pairs
-- only when both arms ran the same input (equal input digests, or no digest on either arm), so
-- delta is null unless both arms scored it and same_input is true.
with head_inputs as (
    select
        task,
        sample_id,
        count(*) as epochs,
        count(error) as errors,
        case when count(*) filter (where error is null and score is null) = 0
            then avg(case when error is not null then 0.0 else score end) end as score,
        case when min(coalesce(input_digest, '')) = max(coalesce(input_digest, '')) then max(input_digest) else '' end
            as input_digest
    from samples
    where repo = $repo and "commit" = $head
    group by task, sample_id
),

base_inputs as (
    select
        task,
        sample_id,
        count(*) as epochs,
        count(error) as errors,
        case when count(*) filter (where error is null and score is null) = 0
            then avg(case when error is not null then 0.0 else score end) end as score,
        case when min(coalesce(input_digest, '')) = max(coalesce(input_digest, '')) then max(input_digest) else '' end
            as input_digest
    from samples
    where repo = $repo and "commit" = $base
    group by task, sample_id
),

paired as (
    select
        coalesce(h.task, b.task) as task,
        coalesce(h.sample_id, b.sample_id) as sample_id,
        h.score as head_score,
        b.score as base_score,
        h.input_digest is not distinct from b.input_digest and coalesce(h.input_digest, '-') != '' as same_input,
        coalesce(h.errors, 0) as head_errors,
        coalesce(b.errors, 0) as base_errors,
        coalesce(h.epochs, 0) as head_epochs,
        coalesce(b.epochs, 0) as base_epochs
    from head_inputs as h
    full outer join base_inputs as b
        on h.task = b.task and h.sample_id = b.sample_id
)

select
    task,
    sample_id,
    head_score,
    base_score,
    case when same_input then head_score - base_score end as delta,
    same_input,
    head_errors,
    base_errors,
    head_epochs,
    base_epochs
from paired
order by task, sample_id
