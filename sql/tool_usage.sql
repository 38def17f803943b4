-- tool_usage: per task, commit and tool: how often the agent called it and how often it failed.
-- Parameter: $repo.
with tool_events as (
    select task, "commit", tool_function, error
    from events
    where repo = $repo and event = 'tool'
)

select
    task,
    "commit",
    tool_function,
    count(*) as calls,
    count(error) as failed_calls
from tool_events
group by task, "commit", tool_function
order by task, "commit", tool_function
