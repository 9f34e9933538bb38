"""threads_per_rank's words resolve in the rank against its share of the cores (cores // ranks on its machine):
auto (the share less the rank's DataLoader workers), share, half (of the share); each at least 1, and none
runs more intra-op threads than cores across the machine's ranks."""

from __future__ import annotations

import os

import pytest

from autotune import Calibration
from autotune.knobs import KNOBS
from autotune.search_space import TrialConfig
from autotune.trial_runner import THREAD_WORDS, compute_threads, resolve_threads

# (cores, local ranks) -> the count of each word at 0, 1 and 2 DataLoader workers
EXPECTED = {
    (16, 1): {"auto": (16, 15, 14), "share": (16, 16, 16), "half": (8, 8, 8)},
    (16, 2): {"auto": (8, 7, 6), "share": (8, 8, 8), "half": (4, 4, 4)},
    (2, 1): {"auto": (2, 1, 1), "share": (2, 2, 2), "half": (1, 1, 1)},
    (2, 2): {"auto": (1, 1, 1), "share": (1, 1, 1), "half": (1, 1, 1)},
}


def _cores(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)))


@pytest.mark.parametrize(("cores", "ranks"), list(EXPECTED))
def test_each_word_resolves_against_the_ranks_share(monkeypatch: pytest.MonkeyPatch, cores: int, ranks: int) -> None:
    _cores(monkeypatch, cores)
    for word, counts in EXPECTED[(cores, ranks)].items():
        assert tuple(resolve_threads(word, ranks, workers) for workers in range(3)) == counts, word
    assert tuple(compute_threads(ranks, w) for w in range(3)) == EXPECTED[(cores, ranks)]["auto"]
    assert resolve_threads(3, ranks, 2) == 3  # a number is the number


@pytest.mark.parametrize("cores", [2, 3, 16])
def test_no_word_oversubscribes_the_cores(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    _cores(monkeypatch, cores)
    for word in THREAD_WORDS:
        for ranks in range(1, cores + 1):
            assert resolve_threads(word, ranks, 0) * ranks <= cores, (word, ranks)


def test_the_knob_table_holds_the_words_the_rank_resolves() -> None:
    assert set(KNOBS["threads_per_rank"].words) == set(THREAD_WORDS)
    with pytest.raises(ValueError, match="threads_per_rank: unknown word 'quarter'; give a number or one of auto"):
        resolve_threads("quarter", 1, 0)


def test_calibration_gives_the_count_for_the_launchers_layout_and_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    _cores(monkeypatch, 16)
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=64, batch_size=64, world_size=4, num_workers=1,
                                threads_per_rank="half")
    chosen = Calibration(config=config, study=None)
    assert chosen.torch_threads() == 2  # all four ranks on this machine: 16 // 4 // 2
    assert chosen.torch_threads(local_world_size=2) == 4  # two machines of two ranks
    assert chosen.threads_rule() == "half: half the rank's share of the cores, at least 1 (the share: cores // ranks " \
                                    "on the machine)"
    assert chosen.env() == {}  # a word is resolved in the rank, not by OMP_NUM_THREADS
    auto = Calibration(config=config.model_copy(update={"threads_per_rank": "auto"}), study=None)
    assert auto.torch_threads(local_world_size=2) == 7
    assert Calibration(config=config.model_copy(update={"threads_per_rank": 1}), study=None).threads_rule() \
        == "1 thread per rank"
