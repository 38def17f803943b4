-- web_trajectory_list: one (commit, task)'s trajectories for the web app's sample list.
-- Parameters: $repo, $commit, $task. One row per (sample id, epoch): its score and error, the
-- model turns and tool calls its events show, its tokens and time, and the batch whose raw log
-- holds it (the page links to that log in Inspect's viewer).
with turns as (
    select
        sample_id,
        epoch,
        count(*) filter (where event = 'model') as turns,
        count(*) filter (where event = 'tool') as tool_calls
    from events
    where repo = $repo and "commit" = $commit and task = $task
    group by sample_id, epoch
)

select
    s.sample_id,
    s.epoch,
    s.score,
    s.error,
    coalesce(t.turns, 0) as turns,
    coalesce(t.tool_calls, 0) as tool_calls,
    s.total_tokens,
    s.total_time_s,
    s.batch
from samples as s
left join turns as t on s.sample_id = t.sample_id and s.epoch = t.epoch
where s.repo = $repo and s."commit" = $commit and s.task = $task
order by s.sample_id, s.epoch
