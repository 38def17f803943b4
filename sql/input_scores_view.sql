-- input_scores: one row per (repo, commit, task, sample id) of every committed batch, each
-- input's epochs reduced by the pairing rule (input_scores_of.sql: errored epochs score 0, an
-- input with an unscored epoch has no score, the digest its epochs share).
create or replace view input_scores as
select
    repo,
    "commit",
    task,
    sample_id,
    epochs,
    errored_epochs,
    unscored_epochs,
    score,
    input_digest,
    first_error,
    first_error_where
from input_scores_of('samples')
