-- paired_samples: head vs base per (task, sample id), each arm's epochs averaged per input first.
-- Parameters: $repo, $head (commit), $base (commit). The pairing rule's outcome over every
-- committed row of the two commits (paired_inputs, from paired_inputs_of.sql): an input present
-- in one arm only shows up with the other arm's columns null; delta is null unless both arms
-- scored it and ran the same input (same_input); errors and epochs count each arm's epochs.
select
    task,
    sample_id,
    head_score,
    base_score,
    delta,
    same_input,
    head_errors,
    base_errors,
    head_epochs,
    base_epochs
from paired_inputs($repo, $head, $base)
order by task, sample_id
