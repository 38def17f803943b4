-- trajectory_events: one (commit, task)'s trajectory events, per event type.
-- Parameters: $repo, $commit, $task.
with partition_events as (
    select sample_id, epoch, event, tool_calls, error
    from events
    where repo = $repo and "commit" = $commit and task = $task
)

select
    event,
    count(*) as events,
    count(distinct (sample_id, epoch)) as trajectories,
    sum(tool_calls) as tool_calls_requested,
    count(error) as errored
from partition_events
group by event
order by events desc, event
