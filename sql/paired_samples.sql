-- paired_samples: head vs base per (task, sample id), each arm's epochs averaged per input first.
-- Parameters: $repo, $head (commit), $base (commit). A full outer join, so an input present in
-- one arm only shows up with the other arm's columns null; delta is null unless both arms scored.
with head_inputs as (
    select task, sample_id, epochs, errors, score
    from input_scores
    where repo = $repo and "commit" = $head
),

base_inputs as (
    select task, sample_id, epochs, errors, score
    from input_scores
    where repo = $repo and "commit" = $base
),

paired as (
    select
        coalesce(h.task, b.task) as task,
        coalesce(h.sample_id, b.sample_id) as sample_id,
        h.score as head_score,
        b.score as base_score,
        h.score - b.score as delta,
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
    delta,
    head_errors,
    base_errors,
    head_epochs,
    base_epochs
from paired
order by task, sample_id
