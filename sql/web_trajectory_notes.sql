-- web_trajectory_notes: the notes on one trajectory (the miner's findings), for the web app.
-- Parameters: $repo, $commit, $task, $sample_id, $epoch. seq is the event a note is on; null for
-- a note on the whole trajectory.
select seq, note
from annotations
where repo = $repo and "commit" = $commit and task = $task and sample_id = $sample_id and epoch = $epoch
order by seq nulls first, note
