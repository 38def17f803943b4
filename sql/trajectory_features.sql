-- trajectory_features: one row per trajectory (a sample's epoch in one batch) of every committed
-- batch, with what the trajectory miner reads: the outcome, the tool calls in order, tool errors,
-- turns, tokens, time, the first failing event and the final answer's length.
--   tool_sequence       tool functions called, in event order ([] when none)
--   tool_seqs           the event seq of each of those calls (same order)
--   tool_error_sequence tool functions whose call returned an error, in event order
--   tool_error_seqs     their event seqs
--   turns               model (assistant) events
--   first_error_seq     seq of the first event carrying an error (a tool error); null if none
--   answer_chars        characters of the last assistant message's text; null if none
create or replace view trajectory_features as
with per_trajectory as (
    select
        repo,
        "commit",
        task,
        batch,
        sample_id,
        epoch,
        list(tool_function order by seq) filter (where event = 'tool' and tool_function is not null) as tool_sequence,
        list(seq order by seq) filter (where event = 'tool' and tool_function is not null) as tool_seqs,
        list(tool_function order by seq) filter (where event = 'tool' and error is not null) as tool_error_sequence,
        list(seq order by seq) filter (where event = 'tool' and error is not null) as tool_error_seqs,
        count(*) filter (where event = 'model') as turns,
        min(seq) filter (where error is not null) as first_error_seq,
        length(arg_max(text, seq) filter (where event = 'model' and role = 'assistant')) as answer_chars,
        count(*) as events
    from events
    group by all
)
select
    s.repo,
    s."commit",
    s.task,
    s.batch,
    s."window",
    s.sample_id,
    s.epoch,
    s.score,
    s.error,
    s.limit_type,
    s.total_tokens,
    s.total_time_s,
    coalesce(t.tool_sequence, []) as tool_sequence,
    coalesce(t.tool_seqs, []) as tool_seqs,
    coalesce(t.tool_error_sequence, []) as tool_error_sequence,
    coalesce(t.tool_error_seqs, []) as tool_error_seqs,
    coalesce(t.turns, 0) as turns,
    t.first_error_seq,
    t.answer_chars,
    coalesce(t.events, 0) as events
from samples s
left join per_trajectory t using (repo, "commit", task, batch, sample_id, epoch)
