"""The multi-node SLURM cluster of the scale tests: two network namespaces (tests/_netns_cluster.py).

``netns_cluster`` starts once per test session and is removed at its end (and by the next session if this
one was killed). ``two_nodes`` points srun/squeue/scancel at it for one test (SLURM_CONF), so it can live
beside the single-node ``slurm_cluster`` of tests/conftest.py. Skipped, with the reason, only without root
or without the Debian packages.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._netns_cluster import NetnsCluster, missing_requirements


@pytest.fixture(scope="session")
def netns_cluster() -> Iterator[NetnsCluster]:
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    cluster = NetnsCluster(nodes=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def two_nodes(netns_cluster: NetnsCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[NetnsCluster]:
    """The two-node cluster, every node up and idle, as this test's SLURM cluster."""
    for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NODELIST", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(var, raising=False)  # never a step of some outer allocation
    monkeypatch.setenv("SLURM_CONF", str(netns_cluster.conf))
    netns_cluster.ensure_up()
    yield netns_cluster
