-- task_arm_summary: per task and commit of a repository: inputs, rows, errors, mean score,
-- tokens, cost and median latency. Parameter: $repo. cost_usd is null unless every row's cost is
-- known (an unknown cost is never summed as 0); cost_unknown_rows says how many are not.
with arm_rows as (
    select
        task,
        "commit",
        sample_id,
        score,
        error,
        total_tokens,
        cost_usd,
        total_time_s
    from samples
    where repo = $repo
)

select
    task,
    "commit",
    count(distinct sample_id) as samples,
    count(*) as sample_epochs,
    count(error) as errors,
    avg(score) as mean_score,
    sum(total_tokens)::bigint as total_tokens,
    avg(total_tokens) as mean_tokens,
    case when count(cost_usd) = count(*) then sum(cost_usd) end as cost_usd,
    count(*) - count(cost_usd) as cost_unknown_rows,
    quantile_cont(total_time_s, 0.5) as p50_total_time_s
from arm_rows
group by task, "commit"
order by task, "commit"
