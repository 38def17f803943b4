"""Pairing of head and base rows (DESIGN §6): epochs averaged, errors and unpaired counted."""

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


def test_errored_samples_are_excluded_and_counted_per_side():
    head = [row("a", 1, 1.0), row("b", 1, None, "timeout"), row("c", 1, 1.0), row("c", 2, None, "sandbox died")]
    base = [row("a", 1, 0.0), row("b", 1, 1.0), row("c", 1, 1.0), row("c", 2, 1.0), row("d", 1, None)]
    p = pair_task(head, base, order=list("abcd"))
    assert p.sample_ids == ("a",)
    assert (p.errored_head, p.errored_base) == (2, 1)
    assert (p.errored_epochs_head, p.errored_epochs_base) == (2, 1)
    # An id errored on one side is not also "unpaired" on the other.
    assert p.unpaired_head == () and p.unpaired_base == ()


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
