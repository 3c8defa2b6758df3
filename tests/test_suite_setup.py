"""The suite's own set-up: under `-n` the tests that share a module-scoped fixture run on one
worker (tests/conftest.py, setup.cfg: --dist loadgroup). If the groups silently stop applying (as
with pytest 9.2 and xdist 3.8), every such fixture is built once per worker: minutes of CI time."""
import pytest


@pytest.fixture(scope="module")
def shared():
    return object()


def test_a_module_fixture_keeps_its_tests_on_one_worker(request, shared):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by an xdist worker with --dist loadgroup")
    assert request.node.nodeid.endswith("@test_suite_setup"), request.node.nodeid
