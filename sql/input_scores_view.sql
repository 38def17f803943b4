-- input_scores: one row per (repo, commit, task, sample id): the input is the unit, so each
-- input's epochs are averaged first. score is the mean over scored epochs (errored epochs have a
-- null score and are counted in errors); null when no epoch was scored.
create or replace view input_scores as
select
    repo,
    "commit",
    task,
    sample_id,
    count(*) as epochs,
    count(error) as errors,
    count(score) as scored_epochs,
    avg(score) as score,
    sum(total_tokens)::bigint as total_tokens,
    sum(cost_usd) filter (where cost_usd is not null) as cost_usd_known,
    count(*) - count(cost_usd) as cost_unknown_epochs
from samples
group by repo, "commit", task, sample_id
