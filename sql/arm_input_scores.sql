-- arm_input_scores: one arm on its own — the pairing rule's per-input reduction
-- (input_scores_of.sql) over the relation arm_rows the caller registered on its connection
-- (stats.arm_input_means: one task's rows of one commit).
select
    sample_id,
    score,
    errored_epochs
from input_scores_of('arm_rows')
