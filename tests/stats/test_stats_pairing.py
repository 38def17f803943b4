"""Pairing of head and base rows (the Statistics page, evalrunner_assets/stats/README.md): epochs averaged, errors scored 0, changed inputs and
unpaired ids counted, never paired."""

from __future__ import annotations

import pytest

from evalrunner_assets.stats import PairingError, pair_task, seeded_order


def row(sid, epoch, score, error=None):
    return {"sample_id": sid, "epoch": epoch, "score": score, "error": error}


def test_epochs_are_averaged_per_input_before_pairing():
    head = [row("a", 1, 1.0), row("a", 2, 0.0), row("a", 3, 1.0), row("b", 1, 1.0)]
    base = [row("a", 1, 0.0), row("a", 2, 0.0), row("a", 3, 1.0), row("b", 1, 0.5)]
    p = pair_task(head, base, order=["b", "a"])
    assert p.sample_ids == ("b", "a")
    assert p.head == pytest.approx((1.0, 2 / 3))
    assert p.base == pytest.approx((0.5, 1 / 3))
    assert p.deltas.tolist() == pytest.approx([0.5, 1 / 3])


def test_errored_epochs_score_zero_and_unscored_inputs_are_excluded_and_counted():
    head = [
        row("a", 1, 1.0),
        row("b", 1, None, "RuntimeError('boom')"),
        row("c", 1, 1.0),
        row("c", 2, None, "ValueError('x')"),
    ]
    base = [row("a", 1, 0.0), row("b", 1, 1.0), row("c", 1, 1.0), row("c", 2, 1.0), row("d", 1, None)]
    p = pair_task(head, base, order=list("abcd"))
    # An errored epoch is the agent failing that sample: it scores 0 and the input is paired.
    assert p.sample_ids == ("a", "b", "c")
    assert p.head == pytest.approx((1.0, 0.0, 0.5))
    assert (p.errored_head, p.errored_base) == (2, 0)
    assert (p.errored_epochs_head, p.errored_epochs_base) == (2, 0)
    # "d" was neither scored nor errored on base: excluded and counted, not unpaired.
    assert (p.unscored_head, p.unscored_base) == (0, 1)
    assert p.unpaired_head == () and p.unpaired_base == ()
    assert (p.inputs_head, p.inputs_base) == (3, 4)


def test_the_error_cause_names_the_exception_where_it_was_raised_and_how_often():
    head = [{**row(s, 1, None, "RuntimeError('boom')"), "error_where": "solver:my_agent"} for s in "abcd"]
    base = [row(s, 1, 1.0) for s in "abcd"]
    p = pair_task(head, base)
    assert p.error_cause("head") == "4/4 samples raised RuntimeError('boom') in solver 'my_agent'"
    assert p.error_cause("base") is None
    assert p.to_dict()["error_head"] == p.error_cause("head")
    assert p.swapped().error_cause("base") == p.error_cause("head")
    mixed = head[:3] + [{**row("d", 1, None, "KeyError('k')"), "error_where": "scorer:match"}]
    assert pair_task(mixed, base).error_cause("head") == (
        "4/4 samples raised errors (3 RuntimeError('boom') in solver 'my_agent'; 1 other cause(s))"
    )
    # One exception type with a message per sample: the type is the cause, not one message.
    per_sample = [{**row(s, 1, None, f"ValueError('bad row {s}')"), "error_where": "solver:my_agent"} for s in "abcd"]
    assert pair_task(per_sample, base).error_cause("head") == (
        "4/4 samples raised ValueError in solver 'my_agent' (4 different messages, e.g. ValueError('bad row a'))"
    )


def digest_row(sid, score, digest):
    return {**row(sid, 1, score), "input_digest": digest}


def test_positional_ids_pair_only_when_their_input_digests_match():
    head = [digest_row("1", 1.0, "aa"), digest_row("2", 1.0, "bb"), digest_row("3", 0.0, "cc")]
    base = [digest_row("1", 0.0, "aa"), digest_row("2", 0.0, "XX"), digest_row("3", 1.0, None)]
    p = pair_task(head, base, order=["1", "2", "3"])
    assert p.sample_ids == ("1",)
    # Id 2 ran different inputs; id 3's base input is unknown: neither is paired, both counted.
    assert p.changed_inputs == ("2", "3")
    d = p.to_dict()
    assert d["changed_inputs"] == 2 and d["changed_input_ids"] == ["2", "3"]
    # Rows that carry no digest on either side pair by id alone (plain score lists).
    assert pair_task([row("1", 1, 1.0)], [row("1", 1, 0.0)]).n_pairs == 1


def test_epochs_of_one_id_with_different_inputs_pair_with_nothing():
    head = [digest_row("1", 1.0, "aa"), {**digest_row("1", 1.0, "bb"), "epoch": 2}]
    base = [digest_row("1", 1.0, "aa"), {**digest_row("1", 1.0, "aa"), "epoch": 2}]
    p = pair_task(head, base)
    assert p.n_pairs == 0 and p.changed_inputs == ("1",)


def test_unpaired_samples_are_counted_not_dropped_silently():
    head = [row("a", 1, 1.0), row("only-head", 1, 1.0)]
    base = [row("a", 1, 1.0), row("only-base", 1, 0.0), row("only-base-2", 1, 0.0)]
    p = pair_task(head, base)
    assert p.n_pairs == 1
    assert p.unpaired_head == ("only-head",)
    assert p.unpaired_base == ("only-base", "only-base-2")
    d = p.to_dict()
    assert (d["unpaired_head"], d["unpaired_base"]) == (1, 2)


def test_pairs_follow_the_given_order_and_default_to_a_seeded_hash_order():
    ids = [f"s{i}" for i in range(20)]
    rows = [row(s, 1, 1.0) for s in ids]
    order = list(reversed(ids))
    assert pair_task(rows, rows, order=order).sample_ids == tuple(order)
    assert pair_task(rows, rows).sample_ids == tuple(seeded_order(ids, 0))
    assert seeded_order(ids, 1) != seeded_order(ids, 2)
    # Adding a sample keeps the relative order of the others.
    assert [s for s in seeded_order(ids + ["new"], 7) if s != "new"] == seeded_order(ids, 7)


def test_integer_sample_ids_pair_with_their_string_form():
    p = pair_task([row(1, 1, 1.0)], [row(1, 1, 0.0)], order=[1])
    assert p.sample_ids == ("1",)


@pytest.mark.parametrize(
    ("head", "order", "message"),
    [
        ([row("a", 1, 1.5)], None, "outside \\[0, 1\\]"),
        ([row("a", 1, 1.0), row("a", 1, 0.0)], None, "appears twice"),
        ([{"sample_id": "a", "epoch": 1, "score": 1.0}], None, "lacks error"),
        ([row("a", "1", 1.0)], None, "epoch must be an integer"),
        ([row("a", 1, "C")], None, "score must be a number"),
        ([row("a", 1, 1.0)], ["zzz"], "not in `order`"),
    ],
)
def test_bad_rows_raise_errors_naming_the_input(head, order, message):
    with pytest.raises(PairingError, match=message):
        pair_task(head, [row("a", 1, 1.0)], order=order)


def test_concurrent_pairings_from_many_threads_each_get_their_own_rows():
    from concurrent.futures import ThreadPoolExecutor

    def pair(k: int):
        head = [row(f"s{i}", 1, float((i + k) % 2)) for i in range(50 + k)]
        base = [row(f"s{i}", 1, 0.0) for i in range(50 + k)]
        return pair_task(head, base)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(pair, range(32)))
    for k, p in enumerate(results):
        assert p.n_pairs == 50 + k
        assert sum(p.head) == sum((i + k) % 2 for i in range(50 + k))
