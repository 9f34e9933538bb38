"""On the CPU the all-reduces that DDP hides behind the backward run on gloo's threads, and where every core is
busy they take their CPU from the backward: that part counts as exposed sync (autotune/trial_runner/
_anatomy.py, (3)). The readings are real (a thread named as gloo's, spinning; this thread's run delay); the rule
is fed known readings."""

from __future__ import annotations

import ctypes
import threading
import time

import pytest
import torch

from autotune.trial_runner._anatomy import SYNC, Displacement, StepLaps


def _named_spinner(name: bytes, seconds: float, named: threading.Event, go: threading.Event,
                   spun: threading.Event, done: threading.Event) -> None:
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME: the OS thread's name
    named.set()
    go.wait()
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    spun.set()
    done.wait()


def test_the_gloo_threads_cpu_and_this_threads_wait_for_a_core_are_read() -> None:
    named, named_too, go, spun, done = (threading.Event() for _ in range(5))
    spinner = threading.Thread(target=_named_spinner, args=(b"pt_gloo_runloop", 0.3, named, go, spun, done))
    other = threading.Thread(target=_named_spinner, args=(b"python", 0.3, named_too, go, threading.Event(), done))
    displacement = None
    try:
        spinner.start()
        other.start()  # not a comm thread: not counted
        named.wait()
        named_too.wait()
        displacement = Displacement.open()
        assert displacement is not None
        delay0, cpu0 = displacement.reading()
        go.set()
        spun.wait()
        delay1, cpu1 = displacement.reading()
    finally:
        done.set()
        spinner.join()
        other.join()
    assert 0.3 <= cpu1 - cpu0 <= 0.32  # the spinner's CPU time since the first reading, and nothing else's
    assert delay1 >= delay0 >= 0.0
    deadline = time.monotonic() + 5  # an ended thread counts no more (once the kernel has let it go)
    while displacement.reading()[1] != 0.0:
        assert time.monotonic() < deadline, displacement.reading()
        time.sleep(0.01)


class _Readings:
    def __init__(self, *readings: tuple[float, float]) -> None:
        self._readings = list(readings)

    def reading(self) -> tuple[float, float]:
        return self._readings.pop(0)


@pytest.mark.parametrize(("delay", "cpu", "counted"), [
    (0.004, 0.003, 0.003),  # every core busy: the backward waited longer than gloo ran; gloo's CPU is exposed
    (0.001, 0.003, 0.001),  # a spare core: the backward waited 1 ms, so at most 1 ms of gloo's time displaced it
    (0.0, 0.003, 0.0),  # an idle core each: nothing displaced
])
def test_the_backwards_wait_for_a_core_counts_up_to_the_gloo_threads_cpu(delay: float, cpu: float,
                                                                         counted: float) -> None:
    laps = StepLaps(torch.device("cpu"), sync=True)
    laps._opened = True
    # three buckets: a reading as each hook ends and as the next one starts; between the hooks the backward
    # computes (half the delay and a third of gloo's CPU in the first gap, the rest in the second), and inside
    # the hooks it waits 5 ms more, which the hooks' own time holds already
    in_hook = 0.005
    laps._displacement = _Readings(  # type: ignore[assignment]
        (1.0, 2.0), (1.0 + delay / 2, 2.0 + cpu / 3),  # first hook's end, second launch
        (1.0 + delay / 2 + in_hook, 2.0 + cpu / 3), (1.0 + delay + in_hook, 2.0 + cpu),  # second hook's end, third
        (1.0 + delay + 2 * in_hook, 2.0 + cpu),  # third hook's end
    )
    for _ in range(3):
        laps.bucket_launched()
        laps.bucket_hooked()
    hooks = laps.totals[SYNC]
    end = laps.mark()
    waited = end - laps._last_launch
    laps.backward_done(end)
    assert laps.totals[SYNC] - hooks - waited == pytest.approx(counted, abs=1e-9)
    assert laps.allreduce_calls == 3
    # the next step starts afresh: one bucket, no gap between hooks, nothing displaced
    laps._displacement = _Readings((9.0, 9.0))  # type: ignore[assignment]
    before = laps.totals[SYNC]
    laps.bucket_launched()
    laps.bucket_hooked()
    hooked = laps.totals[SYNC] - before
    laps.backward_done(laps._last_launch)
    assert laps.totals[SYNC] - before == pytest.approx(hooked, abs=1e-9)
