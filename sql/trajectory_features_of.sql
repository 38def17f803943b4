-- trajectory_features_of: the trajectory_features rows of one (commit, task), in a stable order.
-- Parameters: $repo, $commit, $task.
select *
from trajectory_features
where repo = $repo and "commit" = $commit and task = $task
order by sample_id, epoch, batch
