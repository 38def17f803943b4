-- finetune_training_samples: what a fine-tune learns from by default: every passing sample
-- (score 1, no error) of the given commits of a repository, with the raw Inspect log that
-- holds its messages (the samples table keeps scores, not conversations).
-- Parameters: $repo (owner/name), $commits (list of full SHAs, e.g. main's first-parent history).
-- A custom selection (`evalrunner finetune export --sql FILE`) returns the same columns.
with passing as (
    select repo, "commit", task, batch, sample_id, epoch
    from samples
    where repo = $repo
        and list_contains($commits, "commit")
        and score >= 1.0
        and error is null
),

with_logs as (
    select distinct
        passing.repo,
        passing."commit",
        passing.task,
        passing.sample_id,
        passing.epoch,
        batches.raw_path,
        batches.log_format
    from passing
    inner join batches
        on batches.batch = passing.batch
        and batches.repo = passing.repo
        and batches."commit" = passing."commit"
        and batches.task = passing.task
)

select repo, "commit", task, sample_id, epoch, raw_path, log_format
from with_logs
order by "commit", task, sample_id, epoch
