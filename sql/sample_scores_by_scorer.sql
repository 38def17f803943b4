-- sample_scores_by_scorer: one (commit, task)'s scored rows, per scorer.
-- Parameters: $repo, $commit, $task.
with partition_rows as (
    select sample_id, epoch, scorer, score, error, total_tokens, cost_usd
    from samples
    where repo = $repo and "commit" = $commit and task = $task
)

select
    coalesce(scorer, '(none)') as scorer,
    count(*) as rows,
    count(distinct sample_id) as inputs,
    max(epoch) as epochs,
    avg(score) as mean_score,
    count(score) as scored_rows,
    count(error) as errored_rows,
    sum(total_tokens) as total_tokens,
    sum(cost_usd) as cost_usd,
    count(cost_usd) as priced_rows
from partition_rows
group by all
order by scorer
