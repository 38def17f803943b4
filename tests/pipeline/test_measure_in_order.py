"""Points measured several at a time, handed back in order (pipeline/measure_in_order.py)."""

from __future__ import annotations

import threading
import time

import pytest

from evalrunner_assets.pipeline.measure_in_order import SandboxSlots, measure_in_order


def test_results_come_back_in_the_items_order_though_later_items_finish_first() -> None:
    finished: list[int] = []
    lock = threading.Lock()
    last_done = threading.Event()

    def measure(item: int, stop: threading.Event) -> int:
        if item == 0:
            assert last_done.wait(5)  # the first finishes only after the last has
        with lock:
            finished.append(item)
        if item == 3:
            last_done.set()
        return item * 10

    out = list(measure_in_order([0, 1, 2, 3], measure, ahead=4))
    assert out == [(0, 0), (1, 10), (2, 20), (3, 30)]
    assert finished[-1] == 0  # they really ran at once: the first finished last


def test_no_more_than_ahead_measurements_run_at_once_and_all_of_them_do() -> None:
    running = 0
    most = 0
    lock = threading.Lock()
    gate = threading.Barrier(3, timeout=5)

    def measure(item: int, stop: threading.Event) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        if item < 3:
            gate.wait()  # the first three meet: three ran at once
        time.sleep(0.01)
        with lock:
            running -= 1
        return item

    assert [r for _, r in measure_in_order(range(8), measure, ahead=3)] == list(range(8))
    assert most == 3


def test_an_error_is_raised_at_its_turn_after_the_earlier_results_and_stops_the_rest() -> None:
    stopped: list[int] = []
    returned: list[int] = []
    started_late = threading.Event()

    def measure(item: int, stop: threading.Event) -> int:
        if item == 1:
            time.sleep(0.05)
            raise ValueError("point 1 broke")
        if item == 2:
            if stop.wait(5):  # runs until told to stop
                stopped.append(item)
        if item >= 3:
            started_late.set()
        returned.append(item)
        return item

    got: list[int] = []
    with pytest.raises(ValueError, match="point 1 broke"):
        for _, r in measure_in_order(range(10), measure, ahead=2):
            got.append(r)
    assert got == [0]
    assert stopped == [2]  # told to stop, and waited for: it returned before the raise
    assert 2 in returned
    assert not started_late.is_set()  # nothing after the error started


def test_a_cancel_tells_running_measurements_to_stop() -> None:
    cancel = threading.Event()
    saw_stop: list[int] = []

    def measure(item: int, stop: threading.Event) -> int:
        if item == 0:
            return 0
        assert stop.wait(5)
        saw_stop.append(item)
        return item

    it = measure_in_order([0, 1, 2], measure, ahead=3, cancel=cancel)
    assert next(it) == (0, 0)
    cancel.set()
    rest = list(it)  # the caller decides what a cancelled result is worth; each still comes back
    assert [i for i, _ in rest] == [1, 2]
    assert sorted(saw_stop) == [1, 2]


def test_a_consumer_that_stops_early_stops_what_runs_and_waits_for_it() -> None:
    ended: list[int] = []

    def measure(item: int, stop: threading.Event) -> int:
        if item > 0:
            stop.wait(5)
            ended.append(item)
        return item

    it = measure_in_order(range(5), measure, ahead=3)
    assert next(it) == (0, 0)
    it.close()
    assert sorted(ended) == [1, 2]  # both in flight were stopped and had returned by close()


def test_sandbox_slots_run_jobs_in_the_order_they_were_submitted() -> None:
    order: list[str] = []
    with SandboxSlots(1) as slots:
        futures = [slots.submit(order.append, name) for name in ("old-a", "old-b", "new-a")]
        for f in futures:
            f.result()
    assert order == ["old-a", "old-b", "new-a"]
