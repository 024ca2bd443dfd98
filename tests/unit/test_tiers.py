"""The test tiers (docs/testing.md): every test file sits in a tier folder, each test is marked
with its tier and the cost of its fixtures, and a tier asking for a fixture beyond its means is
refused at collection, before anything is built (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import conftest
import pytest

TESTS = Path(conftest.__file__).resolve().parent


class Item:
    """The part of a collected pytest item that the collection hook reads."""

    def __init__(self, path: Path, fixtures: tuple[str, ...], module_scoped: tuple[str, ...] = ()) -> None:
        self.path = path
        self.fixturenames = (*fixtures, *module_scoped)
        self._fixtureinfo = SimpleNamespace(name2fixturedefs={  # pytest's FixtureDefs, their scope read
            name: (SimpleNamespace(scope="module" if name in module_scoped else "function"),)
            for name in self.fixturenames})
        self.nodeid = f"{path.relative_to(TESTS.parent).as_posix()}::test_x"
        self.marks: list[pytest.Mark] = []

    def add_marker(self, mark) -> None:
        self.marks.append(mark.mark)

    def names(self) -> set[str]:
        return {m.name for m in self.marks}


def collect(*items: Item) -> None:
    conftest.pytest_collection_modifyitems(config=None, items=list(items))


@pytest.mark.parametrize(("tier", "fixture"), [
    ("unit", "model_dir"), ("unit", "gen_model_dir"), ("unit", "native_gen_model_dir"), ("unit", "small_campaign"),
    ("unit", "rental_archives"), ("unit", "docker_client"),
    ("integration", "docker_client"), ("ui", "docker_client"), ("vllm", "docker_client"),
])
def test_a_tier_asking_for_a_fixture_beyond_its_means_is_refused_naming_both(tier, fixture):
    with pytest.raises(pytest.UsageError, match=rf"uses {fixture}: the {tier} tier .* may not"):
        collect(Item(TESTS / tier / "test_x.py", ("tmp_path", fixture)))


def test_a_test_outside_every_tier_folder_is_refused_naming_the_tiers():
    with pytest.raises(pytest.UsageError, match=r"test_x.py is in no tier: put it under tests/<tier>/"):
        collect(Item(TESTS / "test_x.py", ("tmp_path",)))


def test_marks_follow_the_folder_and_the_fixtures():
    model = Item(TESTS / "integration" / "test_x.py", ("model_dir", "gen_model_dir"))
    docker = Item(TESTS / "docker" / "test_x.py", ("docker_client", "model_dir"))
    plain = Item(TESTS / "unit" / "test_x.py", ("tmp_path",))
    collect(model, docker, plain)
    assert {"integration", "model", "generator"} <= model.names()
    assert {"docker", "model"} <= docker.names() and "integration" not in docker.names()
    assert plain.names() == {"unit", "xdist_group"}


def test_a_shared_session_fixture_groups_its_users_on_one_xdist_worker_and_others_by_module():
    a = Item(TESTS / "integration" / "test_a.py", ("small_campaign",))
    b = Item(TESTS / "ui" / "test_b.py", ("tmp_path", "small_campaign"))
    c = Item(TESTS / "integration" / "test_c.py", ("model_dir",))
    collect(a, b, c)
    group = {i: next(m.args[0] for m in i.marks if m.name == "xdist_group") for i in (a, b, c)}
    assert group[a] == group[b] == "small_campaign"
    assert group[c] == "test_c.py"


def group_of(item: Item) -> str:
    return next(m.args[0] for m in item.marks if m.name == "xdist_group")


def test_a_module_campaign_is_built_on_one_worker_whatever_session_fixture_its_users_read():
    """A module-scoped fixture is built once only if all its users share a worker: a user that also
    reads small_campaign (built by one worker per run) takes the module's other users with it; a
    user that also reads an archive set kept across runs (built once for every worker) stays with
    its module; a test sharing nothing expensive goes with the kept fixture it reads."""
    integ = TESTS / "integration"
    both = Item(integ / "test_a.py", ("small_campaign",), module_scoped=("run_a",))
    alone = Item(integ / "test_a.py", ("tmp_path",), module_scoped=("run_a",))
    other = Item(integ / "test_a.py", ("tmp_path", "model_dir"))
    kept = Item(integ / "test_b.py", ("metric_rentals",), module_scoped=("run_b",))
    kept_alone = Item(integ / "test_b.py", ("tmp_path",), module_scoped=("run_b",))
    only_kept = Item(integ / "test_b.py", ("metric_rentals",))
    same_name = Item(integ / "test_c.py", ("tmp_path",), module_scoped=("run_a",))  # another module's
    collect(both, alone, other, kept, kept_alone, only_kept, same_name)
    assert group_of(both) == group_of(alone) == "small_campaign"
    assert group_of(other) == "test_a.py"
    assert group_of(kept) == group_of(kept_alone) == "test_b.py"
    assert group_of(only_kept) == "metric_rentals"
    assert group_of(same_name) == "test_c.py"


def test_the_kept_fixtures_are_the_shared_ones_built_by_kept_across_runs():
    import inspect

    kept = {name for name in conftest.SHARED_SESSION_FIXTURES
            if "kept_across_runs(" in inspect.getsource(getattr(conftest, name).__wrapped__)}
    assert set(conftest.KEPT_ACROSS_RUNS) == kept


def test_a_serial_module_is_marked_serial_and_every_serial_module_exists():
    item = Item(TESTS / "integration" / "test_pass_conditions.py", ("model_dir",))
    collect(item)
    assert "serial" in item.names()
    present = {p.name for p in TESTS.rglob("test_*.py")}
    assert set(conftest.SERIAL_MODULES) <= present, set(conftest.SERIAL_MODULES) - present


def test_every_test_file_is_in_a_tier_folder():
    stray = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")
             if p.relative_to(TESTS).parts[0] not in conftest.TIERS]
    assert stray == []


def test_test_file_names_are_unique_across_tiers():
    """A module of one tier imports helpers from another's by name (conftest's sys.path)."""
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_pinned_workers_split_the_cpus_and_two_workers_never_share_one():
    """--pin-workers (the vLLM tier): each xdist worker gets every n-th CPU from its index, so
    the engines bound to "the first CPUs this process may run on" land on different cores."""
    assert conftest.worker_cpus("gw0", 2, {0, 1}) == {0}
    assert conftest.worker_cpus("gw1", 2, {0, 1}) == {1}
    assert conftest.worker_cpus("gw1", 2, {4, 5, 6, 7}) == {5, 7}
    assert conftest.worker_cpus("gw0", 1, {3, 9}) == {3, 9}
    with pytest.raises(pytest.UsageError, match="3 workers for 2 CPU"):
        conftest.worker_cpus("gw2", 3, {0, 1})


def test_the_vllm_tier_pins_its_workers_and_the_docker_tier_runs_in_parallel():
    import importlib.util

    path = conftest.TESTS.parent / "scripts" / "test_tiers.py"
    spec = importlib.util.spec_from_file_location("test_tiers_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (_, vllm), = script.TIERS["vllm"]
    (_, docker), = script.TIERS["docker"]
    assert "--pin-workers" in vllm and "-n" in vllm and "-n" in docker
