-- web_trajectory_events: one trajectory's events in order, for the web app's event stream.
-- Parameters: $repo, $commit, $task, $sample_id, $epoch. Model, tool and error events (and the
-- sample's input), with the text excerpt the lake keeps of each.
select
    seq,
    event,
    role,
    tool_function,
    tool_arguments,
    error,
    text,
    text_truncated
from events
where
    repo = $repo and "commit" = $commit and task = $task and sample_id = $sample_id and epoch = $epoch
    and event in ('sample_init', 'model', 'tool', 'error', 'score')
order by seq
