-- paired_arm_rows: the pairing rule (paired_inputs_of.sql) over two relations the caller
-- registered on its connection: head_rows and base_rows, the sample rows of each arm
-- (stats.pair_tasks: the rows of the batches the comparison engine selected, per task).
-- Parameters: $repo, $head, $base (the values the caller gave those rows' repo and commit columns).
select
    task,
    sample_id,
    pair_status,
    head_score,
    base_score,
    head_epochs,
    base_epochs,
    head_errors,
    base_errors,
    head_unscored,
    base_unscored,
    head_first_error,
    head_first_error_where,
    base_first_error,
    base_first_error_where
from paired_inputs_of('head_rows', 'base_rows', $repo, $head, $base)
