-- sample_scores_preview: the first rows of one (commit, task), in window and sample order.
-- Parameters: $repo, $commit, $task, $n.
select
    "window",
    sample_id,
    epoch,
    score,
    scorer,
    error,
    total_tokens,
    total_time_s
from samples
where repo = $repo and "commit" = $commit and task = $task
order by window_start, sample_id, epoch
limit $n
