-- trajectory_tools: one (commit, task)'s tool calls, per tool function.
-- Parameters: $repo, $commit, $task.
select
    tool_function,
    count(*) as calls,
    count(error) as failed_calls
from events
where repo = $repo and "commit" = $commit and task = $task and event = 'tool'
group by tool_function
order by calls desc, tool_function
