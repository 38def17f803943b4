-- continuum_frontier: one row per measured candidate of $repo on (cost per sample, suite score),
-- cheapest first, with its place on the frontier:
--   'dominated'    a cheaper candidate is shown at least as good by the paired suite test
--                  (label 'regressed' or 'unchanged' for this one against it), or one at the same
--                  cost is shown better;
--   'uncertain'    not dominated, but a cheaper candidate with a point score at least as high
--                  could not be told apart from it (the test was inconclusive): shown, not dropped;
--   'frontier'     neither;
--   'cost unknown' no cost per sample, so no cost comparison either way.
-- Rows come from candidate_rows (scope 'suite') and candidate_pairs (lake/duck.register_candidates).
with suite as (
    select
        candidate,
        "commit",
        model,
        is_reference,
        mean as score,
        lo,
        hi,
        inputs,
        cost_per_sample,
        p50_latency_s,
        tokens_per_sample
    from candidate_rows
    where repo = $repo and scope = 'suite' and mean is not null
),

dominators as (
    select
        s.candidate,
        string_agg(o.candidate, ', ' order by o.cost_per_sample, o.candidate) as dominated_by
    from suite as s
    inner join candidate_pairs as p on p.repo = $repo and p.candidate = s.candidate
    inner join suite as o on o.candidate = p.other
    where
        (o.cost_per_sample < s.cost_per_sample and p.label in ('regressed', 'unchanged'))
        or (o.cost_per_sample = s.cost_per_sample and p.label = 'regressed')
    group by s.candidate
),

undecided as (
    select
        s.candidate,
        string_agg(o.candidate, ', ' order by o.cost_per_sample, o.candidate) as uncertain_against
    from suite as s
    inner join candidate_pairs as p on p.repo = $repo and p.candidate = s.candidate
    inner join suite as o on o.candidate = p.other
    where
        o.cost_per_sample <= s.cost_per_sample
        and o.score >= s.score
        and p.label not in ('improved', 'regressed', 'unchanged')
    group by s.candidate
)

select
    s.candidate,
    s."commit",
    s.model,
    s.is_reference,
    s.score,
    s.lo,
    s.hi,
    s.inputs,
    s.cost_per_sample,
    s.p50_latency_s,
    s.tokens_per_sample,
    case
        when s.cost_per_sample is null then 'cost unknown'
        when d.dominated_by is not null then 'dominated'
        when u.uncertain_against is not null then 'uncertain'
        else 'frontier'
    end as status,
    d.dominated_by,
    u.uncertain_against
from suite as s
left join dominators as d on d.candidate = s.candidate
left join undecided as u on u.candidate = s.candidate
order by s.cost_per_sample nulls last, s.score desc, s.candidate
