"""Shared fixtures: the real demo model, small real corpora cut from the demo corpus, campaigns."""

from __future__ import annotations

import ast
import asyncio
import functools
import gc
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / ".cache" / "models" / "demo-minilm-20ng"
GEN_MODEL = REPO / ".cache" / "models" / "demo-gen-20ng"
NATIVE_GEN_MODEL = REPO / ".cache" / "models" / "demo-gen-native-20ng"
COMPARISON = REPO / "demo" / "corpus" / "comparison.jsonl"
TESTS = Path(__file__).resolve().parent

# ---- tiers by cost (docs/testing.md) ---------------------------------------------------------
# A test's tier is the folder it lives in; `make test-<tier>` runs one, `make test` all of them.
TIERS = {
    "unit": "no model, no engine, no terminal: seconds (make test-fast)",
    "integration": "the demo models and real local passes (make test-integration)",
    "ui": "the Textual screens, the terminal (tmux) and the report in Chromium (make test-ui)",
    "docker": "a running Docker engine and the CPU image (make test-docker)",
    "vllm": "the vLLM venv and its engines (make test-vllm)",
}
# Marks a test gets from the fixtures it uses, so `-m` selects by cost (`-m "not generator"`).
FIXTURE_MARKS = {
    "model_dir": "model", "small_campaign": "model", "rental_archives": "model",
    "metric_rentals": "model", "two_rentals": "model",
    "gen_model_dir": "generator", "native_gen_model_dir": "generator",
    "docker_client": "docker",
}
# What a tier may not ask for: the fixtures that build a model, run a campaign or need an engine
# belong to the tiers named here (a unit test asking for one is refused before any is built).
NOT_IN_TIER = {
    "unit": {"model_dir", "small_campaign", "gen_model_dir", "native_gen_model_dir", "rental_archives",
             "metric_rentals", "two_rentals", "docker_client"},
    "integration": {"docker_client"},
    "ui": {"docker_client"},
    "vllm": {"docker_client"},
}
# Session fixtures that several modules share: under pytest-xdist (--dist loadgroup) every test
# using one runs on the worker that built it, so each is built once per run. Every other test
# is grouped with its module, so module-scoped fixtures are built once too (xdist_groups).
SHARED_SESSION_FIXTURES = ("small_campaign", "left_padded_classifier", "left_padded_embedding",
                           "rental_archives", "metric_rentals", "two_rentals", "vllm_classifier")
# Those of them built once for every worker and run (kept_across_runs, under a file lock): a test
# using one beside a module-scoped fixture runs with its module, where that fixture is built.
KEPT_ACROSS_RUNS = ("rental_archives", "metric_rentals", "two_rentals")
# Serial: tests whose verdict depends on the CPU they get or on wall-clock timing (CPU affinity
# and starvation, the CPU's measured ceiling, stall deadlines, signals timed into a pass, timed
# windows side by side, keys typed into a terminal). Memory peaks and address-space limits are
# per process and hold beside another worker (the RLIMIT_AS and multi-card tests run in
# parallel). scripts/test_tiers.py runs the serial ones after the parallel part, in one process.
SERIAL_MODULES = {
    "test_pass_conditions.py": "CPU affinity and starvation flags",
    "test_utilization.py": "utilization against the CPU's measured ceiling",
    "test_stalls_liveness.py": "stall deadlines in seconds",
    "test_headless.py": "signals delivered into a running pass",
    "test_bench_script.py": "the overhead ratio bench against a bare loop",
    "test_bench_peer_lab_side.py": "timed windows compared side by side",
    "test_tui_e2e.py": "a terminal (tmux) driven with timed keys",
}


# A test module may import a helper from another tier's module (`from test_task_embedding import
# embedding_campaign`): pytest puts only the test's own folder on sys.path, so every tier folder
# is appended here. Test file names are therefore unique across tiers (tests/unit/test_tiers.py).
sys.path.extend(str(TESTS / tier) for tier in TIERS if str(TESTS / tier) not in sys.path)


def tier_of(path: Path) -> str:
    """The tier folder a test file lives in (tests/<tier>/...); UsageError for a test elsewhere."""
    rel = Path(path).resolve().relative_to(TESTS)
    if len(rel.parts) < 2 or rel.parts[0] not in TIERS:
        raise pytest.UsageError(f"{rel} is in no tier: put it under tests/<tier>/, tier one of "
                                f"{', '.join(TIERS)} (docs/testing.md says which)")
    return rel.parts[0]


def pytest_addoption(parser):
    parser.addoption("--pin-workers", action="store_true",
                     help="give each pytest-xdist worker its own share of this process's CPUs "
                          "(worker i: CPUs i, i+n, ...), so engines that bind one thread per CPU "
                          "(vLLM's CPU backend binds the first CPUs it may run on) run side by side "
                          "instead of on the same core")


def worker_cpus(worker: str, count: int, allowed: set[int]) -> set[int]:
    """The CPUs of pytest-xdist worker ``worker`` ("gw0", "gw1", ...) among ``count`` workers:
    every ``count``-th of ``allowed`` (sorted) from its index. Raises UsageError when there are
    fewer CPUs than workers (two workers on one CPU would only look parallel)."""
    cpus = sorted(allowed)
    if count > len(cpus):
        raise pytest.UsageError(f"--pin-workers: {count} workers for {len(cpus)} CPU(s); "
                                f"run at most -n {len(cpus)}")
    return set(cpus[int(worker.removeprefix("gw")) % count::count])


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if config.getoption("--pin-workers") and worker:
        os.sched_setaffinity(0, worker_cpus(worker, int(os.environ["PYTEST_XDIST_WORKER_COUNT"]),
                                            os.sched_getaffinity(0)))
    for tier, what in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: tier {tier}: {what}")
    config.addinivalue_line("markers", "model: uses the demo classifier (built by `make model`)")
    config.addinivalue_line("markers", "generator: uses a demo generator (built by `make model-gen` or "
                                       "`make model-gen-native`)")
    config.addinivalue_line("markers", "serial: sensitive to CPU load or timing; run alone, never beside "
                                       "another worker (conftest.SERIAL_MODULES says why)")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier (its folder), with the cost of the fixtures it uses
    (FIXTURE_MARKS) and ``serial`` where SERIAL_MODULES names its module; give it its
    pytest-xdist group. Refuse a test that asks for a fixture its tier may not build
    (NOT_IN_TIER), before any is built."""
    for item in items:
        tier = tier_of(item.path)
        fixtures = set(getattr(item, "fixturenames", ()))
        wanted = NOT_IN_TIER.get(tier, set()) & fixtures
        if wanted:
            raise pytest.UsageError(f"{item.nodeid} uses {', '.join(sorted(wanted))}: the {tier} tier "
                                    f"({TIERS[tier]}) may not; move it to the tier that builds it")
        item.add_marker(getattr(pytest.mark, tier))
        for fixture, mark in FIXTURE_MARKS.items():
            if fixture in fixtures:
                item.add_marker(getattr(pytest.mark, mark))
        if item.path.name in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
    for item, group in xdist_groups(items).items():
        item.add_marker(pytest.mark.xdist_group(group))


def module_fixtures(item) -> set[str]:
    """Names of the module-scoped fixtures ``item`` uses (directly or through another fixture)."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return {name for name, d in defs.items() if d and d[-1].scope == "module"}


def xdist_groups(items) -> dict:
    """{item: its pytest-xdist group (--dist loadgroup)}: tests that share a built instance, a
    session fixture of SHARED_SESSION_FIXTURES that is not kept across runs or a module-scoped
    fixture of their module, land in one group, so each instance is built on one worker only.
    Such a group is named after its session fixture, else after its module. A test that shares
    none of them runs with the first kept fixture it uses (KEPT_ACROSS_RUNS: one worker builds
    it while the others go on), else with its module. So a test reading small_campaign and its
    module's campaign takes the campaign's other users to small_campaign's worker."""
    parent: dict = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    shared = {f for f in SHARED_SESSION_FIXTURES if f not in KEPT_ACROSS_RUNS}
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for node in [("session", f) for f in sorted(shared & fixtures)] + \
                    [("module", item.path.name, f) for f in sorted(module_fixtures(item))]:
            parent[root(node)] = root(("test", id(item)))
    members: dict = {}
    for node in list(parent):
        members.setdefault(root(node), set()).add(node)
    out = {}
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        nodes = members.get(root(("test", id(item))), set())
        session = sorted((SHARED_SESSION_FIXTURES.index(n[1]), n[1]) for n in nodes if n[0] == "session")
        kept = next((f for f in KEPT_ACROSS_RUNS if f in fixtures), None)
        if session:
            out[item] = session[0][1]
        elif any(n[0] == "module" for n in nodes):
            out[item] = item.path.name
        else:
            out[item] = kept or item.path.name
    return out


def pytest_collection_finish(session):
    """Once every test module is imported (torch, transformers, pandas, textual: hundreds of
    thousands of long-lived objects), move them out of the cyclic collector's reach
    (``gc.freeze``): each ``gc.collect()`` the code under test makes
    (``lab.memory.observe.release_memory`` before every peak reset) and pytest's own at the
    session's end then scan only what the tests allocated since (a collect with torch imported
    took about 0.12 s CPU here, and microseconds after the freeze). Objects made later are
    collected as before; the frozen ones are module-level state, never garbage a test waits on."""
    gc.freeze()


@functools.cache
def engine_trees() -> tuple[tuple[str, str, ast.Module], ...]:
    """(path relative to the repository, source, syntax tree) of every module of lab/ and tui/,
    parsed once per session for the tests that read the sources (status words, event kinds,
    defaults): parsing all of them took about 0.5 s CPU here, each time."""
    paths = sorted([*(REPO / "lab").rglob("*.py"), *(REPO / "tui").rglob("*.py")])
    return tuple((p.relative_to(REPO).as_posix(), text, ast.parse(text)) for p in paths
                 for text in (p.read_text(),))


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The demo model (MiniLM-L6 + fitted head); built once if `make model` has not run."""
    return built_once(MODEL, "build-demo")


@pytest.fixture(scope="session")
def gen_model_dir() -> Path:
    """The demo generator; built once (a few minutes) if `make model-gen` has not run."""
    return built_once(GEN_MODEL, "build-demo-gen")


@pytest.fixture(scope="session")
def native_gen_model_dir() -> Path:
    """The native demo generator (OPTForCausalLM, the one vLLM loads); built once (minutes on a
    loaded 2-core machine) if `make model-gen-native` has not run: no make target builds it
    before the tests."""
    return built_once(NATIVE_GEN_MODEL, "build-demo-gen-native")


@pytest.fixture(scope="session")
def vllm_classifier(model_dir, tmp_path_factory):
    """The demo classifier in one vLLM engine for the session, serving every test that asks for it
    (tests/vllm/test_engine_vllm.py, tests/vllm/test_vllm_observed.py): max_model_len 256, threads 1
    (the vLLM tier pins each worker to one CPU anyway), the KV cache set to 1 GiB through
    ``VLLM_CPU_KVCACHE_SPACE`` (set for its start only), the lab's other defaults (prefix caching off,
    memory fraction 0.1). Starting it takes 35-40 s here, so it is started once. Yields the started
    lab.engines.vllm.VllmClient; skips, saying why, where the vLLM venv is absent or stale."""
    from lab.engines import vllm_env
    from lab.engines.vllm import VllmClient, settings_for
    from lab.inputs.variants import Variant

    if not vllm_env.is_ready():
        pytest.skip(f"the vLLM venv {vllm_env.venv_dir()} is absent or older than requirements-vllm.txt; run "
                    "`make vllm-env` (.ci/run does)")
    variant = Variant(engine="vllm", max_length=VLLM_MAX_MODEL_LEN, batch_size=200)
    log = tmp_path_factory.mktemp("vllm-classifier") / "vllm.log"
    client = VllmClient(settings_for(variant, model_dir, "cpu", threads=1), log_path=log)
    with pytest.MonkeyPatch.context() as env:  # restored once the engine has started
        env.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
        client.start()
    try:
        yield client
    finally:
        client.close()


VLLM_MAX_MODEL_LEN = 256
"""max_model_len of the session's vLLM classifier (:func:`vllm_classifier`)."""


def built_once(folder: Path, verb: str) -> Path:
    """``folder``, built by ``iteralab model <verb>`` when it holds no config.json yet; under a
    file lock, so pytest-xdist workers asking at once build it once and the others wait."""
    from filelock import FileLock

    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f".{folder.name}.lock")):
        if not (folder / "config.json").is_file():
            subprocess.run([sys.executable, "-m", "lab.cli", "model", verb, "--out", str(folder)],
                           check=True, cwd=REPO)
    return folder


# ---- waiting ------------------------------------------------------------------------------
# A test waits on what the app or the product does, never for a fixed delay:
#   settle        the app's own work (its workers and the messages they post): no timeout needed;
#   AppMessages   a Pilot test whose app watches something outside it (a detached orchestrator
#                 writing the journal): woken by each message the app handles, with a deadline;
#   wait_until    a plain test waiting on another process (a file it writes, a terminal's text),
#                 the one bounded polling loop of the suite.


async def settle(pilot, cond=None, what: str = "the screen", rounds: int = 20):
    """Wait for the app's workers to complete, then for the messages they posted and the
    refreshes those cause; again while a handler started new workers. No sleeping.

    The app must end its workers (``poll_interval_s=None, telemetry_interval_s=None``: the
    journal and telemetry are read once; a test that changes the journal calls
    ``app.poll_journal()`` to read it again). ``cond``: a zero-argument callable; returns its
    value, AssertionError naming ``what`` when it is false once the app is idle. A worker
    that raised makes this raise (``WorkerFailed``); one cancelled by its exclusive rerun
    does not.
    """
    from textual.worker import WorkerCancelled

    app = pilot.app
    for _ in range(rounds):
        # each worker's handle; one cancelled (replaced by an exclusive rerun) is not an error
        for outcome in await asyncio.gather(*(w.wait() for w in app.workers), return_exceptions=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, WorkerCancelled):
                raise outcome
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        if all(w.is_finished for w in app.workers) and (cond is None or cond()):
            break
    assert all(w.is_finished for w in app.workers), f"workers still running after {rounds} rounds: {list(app.workers)}"
    if cond is None:
        return None
    value = cond()
    assert value, f"{what}: not shown once the app's workers completed"
    return value


class AppMessages:
    """Wakes a Pilot test each time the app handles one of its own messages (tui.messages: a
    journal snapshot, a worker's result, a telemetry sample), for a condition that something
    outside the app makes true (a detached orchestrator running passes).

    Pass ``hook`` as ``app.run_test(message_hook=...)``; then ``await until(...)``.
    """

    def __init__(self) -> None:
        self._arrived = asyncio.Event()

    def hook(self, message) -> None:
        if type(message).__module__ == "tui.messages":
            self._arrived.set()

    async def until(self, pilot, cond, timeout_s: float, what: str, detail=None):
        """``cond()``'s first true value, checked once the app has handled each message;
        AssertionError naming ``what`` (and ``detail()``, e.g. the pass statuses) after
        ``timeout_s`` seconds."""
        async def first_true():
            while True:
                self._arrived.clear()  # before checking: a message handled meanwhile wakes us
                await pilot.pause()
                if value := cond():
                    return value
                await self._arrived.wait()
        try:
            return await asyncio.wait_for(first_true(), timeout_s)
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}"
                                 + (f": {detail()}" if detail else "")) from None


def wait_until(cond, timeout_s: float, what: str, interval_s: float = 0.2, detail=None):
    """Call ``cond()`` every ``interval_s`` until it returns a true value (returned): for a
    process outside the test's control. AssertionError naming ``what`` (and ``detail()``,
    e.g. the terminal's text) after ``timeout_s`` seconds."""
    end = time.monotonic() + timeout_s
    while not (value := cond()):
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}"
                                 + (f":\n{detail()}" if detail else ""))
        time.sleep(interval_s)
    return value


PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)")


def pins(path: Path) -> dict[str, str]:
    """{canonical name: version} of a requirements file's ``name==version`` lines."""
    from packaging.utils import canonicalize_name

    out = {}
    for line in path.read_text().splitlines():
        m = PIN.match(line)
        if m:
            out[canonicalize_name(m.group(1))] = m.group(2)
    return out


def demo_rows() -> list[dict]:
    return [json.loads(line) for line in COMPARISON.read_text(encoding="utf-8").splitlines()]


def read_members(path) -> dict[str, bytes]:
    """{member name: bytes} of every regular file of the tar.gz ``path`` (an archive to edit)."""
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def write_members(path, files: dict[str, bytes], resum: bool = True):
    """Write ``files`` as a tar.gz; with ``resum`` SHA256SUMS is recomputed (a consistent edit)."""
    if resum:
        sums = next(n for n in files if n.endswith("/SHA256SUMS"))
        top = sums.split("/")[0]
        files[sums] = "".join(f"{hashlib.sha256(d).hexdigest()}  {n[len(top) + 1:]}\n"
                              for n, d in files.items() if n != sums).encode()
    with tarfile.open(path, "w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def cut_corpus(path: Path, short: int, medium: int, long: int) -> Path:
    """Write N items of each bucket of the demo corpus, spread over its classes, to ``path``.

    Buckets come in the order short, medium, long (so small batches meet long items last).
    """
    rows = demo_rows()
    out = []
    for bucket, n in (("short", short), ("medium", medium), ("long", long)):
        in_bucket = [r for r in rows if r["bucket"] == bucket]
        out += in_bucket[:: max(1, len(in_bucket) // n)][:n] if n else []
    path.write_text("".join(json.dumps(r) + "\n" for r in out), encoding="utf-8")
    return path


CAMPAIGN = """
[campaign]
name = "{name}"
question = "Which configuration processes all my documents at the lowest committed budget?"

[corpus]
path = "{corpus}"

[model]
path = "{model}"

[quality]
metric = "accuracy"
threshold = {threshold}
reference_variant = "batch/batch_size=1"
tolerance = 0.05

[timing]
warmup_items = 2
warmup_passes = 1
repetitions = {repetitions}
seed = 0
threads = 1

[defaults]
max_length = {max_length}
padding = "{padding}"

[[series]]
name = "batch"
factor = "batch_size"
values = {values}
"""


def write_campaign(folder: Path, model: Path, corpus: Path, name: str = "t", repetitions: int = 1,
                   values=(1, 8), threshold: float = 0.2, max_length: int = 128,
                   padding: str = "longest") -> Path:
    f = folder / f"{name}.toml"
    rel = corpus.name if corpus.parent == folder else str(corpus)  # relative paths are the common case
    f.write_text(CAMPAIGN.format(name=name, corpus=rel, model=model, threshold=threshold,
                                 repetitions=repetitions, values=list(values),
                                 max_length=max_length, padding=padding))
    return f


def custom_campaign(folder: Path, model_dir: Path, entry: str, values=(1, 8)) -> Path:
    """A campaign file of the custom task (the user's own inference code, ``entry`` as
    "file.py:Class") over 10 demo items, batch sizes ``values``, one repetition."""
    corpus = cut_corpus(folder / "corpus.jsonl", 5, 3, 2)
    f = write_campaign(folder, model_dir, corpus, name="custom", repetitions=1, values=values)
    f.write_text(f.read_text() + f'\n[task]\nkind = "custom"\nentry = "{entry}"\n')
    return f


@pytest.fixture()
def fake_model(tmp_path) -> Path:
    """A folder that passes only the cheap model-folder check (lab.inputs.models.local_checkpoint_config:
    a config.json object and a safetensors file whose header parses): the checks after it come
    next, nothing can load it as a model."""
    import numpy
    from safetensors.numpy import save_file

    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"max_position_embeddings": 512}')
    save_file({"w": numpy.zeros(4, dtype=numpy.float32)}, str(d / "model.safetensors"))
    return d


@pytest.fixture()
def runs_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("ITERALAB_RUNS", str(root))
    return root


# ---- session fixtures kept across pytest runs ---------------------------------------------------
# The tiers are separate pytest runs (scripts/test_tiers.py): an archive set that the integration
# and ui tiers both read was built twice (rental_archives, 18 real passes, about 140 s under CI's
# load, each time). It is built once into pytest's cache folder, keyed by everything its passes
# depend on; any change to these makes a new key, and the old folder of that fixture is removed.
@functools.cache
def fixture_key() -> str:
    """sha256 (hex, 16 characters) of what a kept fixture's archives depend on: the lab's sources,
    this file (the builders), the demo corpus and model files, the interpreter and the locks."""
    import hashlib

    from lab.facts.files import lab_sources_sha256, sha256_file

    h = hashlib.sha256(lab_sources_sha256(REPO).encode())
    for f in (Path(__file__), COMPARISON, REPO / "requirements.lock", REPO / "requirements-dev.lock",
              *sorted(p for p in MODEL.glob("*") if p.is_file())):
        h.update(f"{f.name} {sha256_file(f) if f.is_file() else 'absent'}\n".encode())
    h.update(f"{sys.executable} {REPO}".encode())
    return h.hexdigest()[:16]


def kept_across_runs(config, name: str, build):
    """``build(folder)`` for the session fixture ``name``, run once into pytest's cache folder
    (``.pytest_cache/d/fixtures/<name>-<fixture_key()>``) and read back by every later run and
    every pytest-xdist worker: ``build`` returns a dict or list of paths inside ``folder``, kept
    as JSON. A folder without its ``fixture.json`` (a build that did not finish) is built again;
    under a file lock, so concurrent asks build once. Fixtures kept this way are read-only to
    their tests (as every shared session fixture already is)."""
    import shutil

    from filelock import FileLock

    root = Path(config.cache.mkdir("fixtures"))
    folder = root / f"{name}-{fixture_key()}"
    with FileLock(str(root / f".{name}.lock")):
        done = folder / "fixture.json"
        if not done.is_file():
            for old in root.glob(f"{name}-*"):
                shutil.rmtree(old, ignore_errors=True)
            folder.mkdir(parents=True)
            value = build(folder)
            rel = {k: str(Path(v).relative_to(folder)) for k, v in value.items()} if isinstance(value, dict) \
                else [str(Path(v).relative_to(folder)) for v in value]
            done.write_text(json.dumps(rel))
        kept = json.loads(done.read_text())
    return {k: folder / v for k, v in kept.items()} if isinstance(kept, dict) else [folder / v for v in kept]


@pytest.fixture(scope="session")
def small_campaign(tmp_path_factory, model_dir):
    """A real finished campaign: 10 items, batch 1 and 4, 2 repetitions (4 passes), reported."""

    d = tmp_path_factory.mktemp("small")
    corpus = cut_corpus(d / "corpus.jsonl", 5, 3, 2)
    f = write_campaign(d, model_dir, corpus, name="small", repetitions=2, values=(1, 4))
    return run_reported(f)


def copy_with(src: Path, dest: Path, name: str, change: dict) -> Path:
    """``src`` copied to ``dest`` with the JSON file ``name`` updated by ``change``."""
    import shutil

    shutil.copytree(src, dest)
    data = json.loads((dest / name).read_text())
    (dest / name).write_text(json.dumps({**data, **change}, indent=1))
    return dest


def run_reported(f: Path, env: dict | None = None):
    """Lock, run (into ``f``'s folder/runs) and report the campaign ``f`` with ``env`` set in this
    process (the passes and the orchestrator's host record inherit it); the environment is
    restored after. Returns the orchestrator of the finished campaign."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.report.build import build_report

    before = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        lock(load_protocol(f))
        orch = Orchestrator.prepare(f, f.parent / "runs", LocalLauncher())
        assert orch.run() == "finished"
        build_report(orch.dir)
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return orch


# The example of a checkpoint padded on the left (issue 31): read by test_agreement_decides
# (a batch-8 pass is accepted only within the agreement rule) and test_observed_inputs (the side
# the lab padded is observed and recorded), one campaign per task kind.
def left_padded_campaign(d: Path, model_dir: Path, kind: str, env: dict | None = None):
    """Batch 1 and 8 over 17 demo items (6 short, 6 medium, 5 long: the long ones padded most)
    on a copy of the demo classifier whose tokenizer_config.json says ``"padding_side": "left"``,
    threshold 0.2, as ``kind`` (classification: accuracy; embedding: nn_accuracy, mean pooling,
    normalised); run and reported with ``env`` (run_reported)."""
    model = copy_with(model_dir, d / "model", "tokenizer_config.json", {"padding_side": "left"})
    f = write_campaign(d, model, cut_corpus(d / "corpus.jsonl", 6, 6, 5), name=f"left-{kind}", values=(1, 8))
    if kind == "embedding":
        f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "nn_accuracy"')
                     + '\n[task]\nkind = "embedding"\npooling = "mean"\nnormalize = true\n')
    return run_reported(f, env)


@pytest.fixture(scope="session")
def left_padded_classifier(tmp_path_factory, model_dir):
    """left_padded_campaign as a classifier, with ATEN_CPU_CAPABILITY=default (torch's DEFAULT
    kernels instead of AVX2/AVX-512) in the passes' and the host record's environment."""
    return left_padded_campaign(tmp_path_factory.mktemp("left-cls"), model_dir, "classification",
                                {"ATEN_CPU_CAPABILITY": "default"})


@pytest.fixture(scope="session")
def left_padded_embedding(tmp_path_factory, model_dir):
    """left_padded_campaign as an embedding model."""
    return left_padded_campaign(tmp_path_factory.mktemp("left-emb"), model_dir, "embedding")


def run_rental(folder: Path, model: Path, corpus: Path, *, threads: int, gpu: str | None,
               repetitions: int = 2, values=(1, 4), passes: int | None = None, edit=None) -> Path:
    """One rental's campaign run by the real product (lock, local passes, archive): the
    same campaign file except ``[timing] threads`` (recorded in the manifest) and ``[cost]``
    (``gpu`` None: no [cost] section, no package declared). ``passes``: run only the first
    that many planned passes and pack the archive labelled partial (an unfinished campaign).
    ``edit``: a function (campaign file text -> text) applied before the lock."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.service.campaigns import make_archive

    folder.mkdir(parents=True, exist_ok=True)
    f = write_campaign(folder, model, corpus, name="rental", repetitions=repetitions, values=values)
    f.write_text(f.read_text().replace("threads = 1", f"threads = {threads}")
                 + (f'\n[cost]\ngpu = "{gpu}"\ndays = 7\nlots = 1\n' if gpu else ""))
    if edit is not None:
        f.write_text(edit(f.read_text()))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, folder / "runs", LocalLauncher())
    if passes is not None:
        for slot in orch.pending()[:passes]:
            assert orch.run_slot(slot)["status"] == "ok"
        return make_archive(orch.dir, partial=True)
    assert orch.run() == "finished"
    return make_archive(orch.dir)


@pytest.fixture(scope="session")
def rental_archives(request, model_dir) -> dict:
    """Five real evidence archives: the same tiny campaign (7 items, batch 1 and 4, 2
    repetitions) run with threads 1 priced as rtx-4090, threads 2 priced as b200 and
    threads 1 without [cost] (no package declared), the same campaign stopped after its first
    pass and archived labelled partial (priced as b200), and one on another corpus (8 items,
    batch 1, 1 repetition) for the mismatch. Kept across runs (kept_across_runs)."""
    return kept_across_runs(request.config, "rental_archives", lambda d: build_rental_archives(d, model_dir))


def build_rental_archives(d: Path, model_dir: Path) -> dict:
    corpus = cut_corpus(d / "corpus.jsonl", 4, 2, 1)
    other = cut_corpus(d / "other.jsonl", 5, 2, 1)
    out = {}
    for key, threads, gpu in (("rtx", 1, "rtx-4090"), ("b200", 2, "b200"), ("nocost", 1, None)):
        sub = d / key
        sub.mkdir()
        c = sub / "corpus.jsonl"
        c.write_bytes(corpus.read_bytes())
        out[key] = run_rental(sub, model_dir, c, threads=threads, gpu=gpu)
    sub = d / "partial"
    sub.mkdir()
    (sub / "corpus.jsonl").write_bytes(corpus.read_bytes())
    out["partial"] = run_rental(sub, model_dir, sub / "corpus.jsonl", threads=1, gpu="b200", passes=1)
    sub = d / "other"
    sub.mkdir()
    (sub / "corpus.jsonl").write_bytes(other.read_bytes())
    out["other"] = run_rental(sub, model_dir, sub / "corpus.jsonl", threads=1, gpu="rtx-4090",
                              repetitions=1, values=(1,))
    return out


# The rental window of the compare tests (compare's --window-start and --deadline; short allowed).
WINDOW = {"window_start": "2026-12-01T09:00+01:00", "deadline": "2026-12-05T09:00+01:00", "allow_short": True}


# A user's own [quality] metric file (mymetric.py), for the campaigns judged by it (judged_by).
METRIC = '''"""A user's evaluation procedure: the share of exact label matches, counted by hand."""


def share_right(predictions, references):
    assert len(predictions) == len(references)
    return sum(p == r for p, r in zip(predictions, references)) / len(references)
'''


def judged_by(text: str) -> str:
    """A campaign file's text judged by mymetric.py:share_right (METRIC) instead of accuracy."""
    return text.replace('metric = "accuracy"', 'metric = "mymetric.py:share_right"\ndirection = "higher"')


def another_metric_file(folder: Path) -> Path:
    """<folder>/mymetric.py: METRIC's function and one more line, so another sha256, that would
    leave <folder>/ran if it were ever run (a refused file must not be)."""
    other = folder / "mymetric.py"
    other.write_text(METRIC + f"\nopen({str(folder / 'ran')!r}, 'w').close()\n")
    return other


@pytest.fixture(scope="session")
def metric_rentals(request, model_dir) -> dict:
    """Three archives of a 4-item campaign judged by mymetric.py (batch 1, one pass): threads 1
    priced rtx-4090 and threads 2 priced b200 with the same metric file, and one (b200) whose
    metric file has one more comment line (another sha256). Kept across runs (kept_across_runs)."""
    return kept_across_runs(request.config, "metric_rentals", lambda d: build_metric_rentals(d, model_dir))


def build_metric_rentals(d: Path, model_dir: Path) -> dict:
    corpus = cut_corpus(d / "corpus.jsonl", 2, 1, 1)
    out = {}
    for key, threads, gpu, code in (("rtx", 1, "rtx-4090", METRIC), ("b200", 2, "b200", METRIC),
                                    ("changed", 2, "b200", METRIC + "# changed since\n")):
        sub = d / key
        sub.mkdir()
        (sub / "corpus.jsonl").write_bytes(corpus.read_bytes())
        (sub / "mymetric.py").write_text(code)
        out[key] = run_rental(sub, model_dir, sub / "corpus.jsonl", threads=threads, gpu=gpu, repetitions=1,
                              values=(1,), edit=judged_by)
    out["file"] = d / "rtx" / "mymetric.py"
    return out


@pytest.fixture(scope="session")
def two_rentals(request, model_dir) -> list[Path]:
    """Two real evidence archives of one tiny campaign (4 items, batch 1, one pass each),
    threads 1 priced as rtx-4090 and threads 2 priced as b200: the cheapest comparison. Kept
    across runs (kept_across_runs)."""
    return kept_across_runs(request.config, "two_rentals", lambda d: build_two_rentals(d, model_dir))


def build_two_rentals(d: Path, model_dir: Path) -> list[Path]:
    corpus = cut_corpus(d / "corpus.jsonl", 2, 1, 1)
    out = []
    for key, threads in (("rtx-4090", 1), ("b200", 2)):
        sub = d / key
        sub.mkdir()
        (sub / "corpus.jsonl").write_bytes(corpus.read_bytes())
        out.append(run_rental(sub, model_dir, sub / "corpus.jsonl", threads=threads, gpu=key, repetitions=1,
                              values=(1,)))
    return out


# ---- Docker tests (tests/docker/test_docker_*.py) ------------------------------------------------
DOCKER_TEST_LABEL = "iteralab.test"
# This pytest session's value of that label. Teardown removes only this session's containers:
# several sessions may share one engine, and removing by the bare label killed the passes of
# another session's tests (a SIGKILL under a memory limit reads as "killed, host memory") and
# raced its own removals (409 "removal already in progress").
DOCKER_TEST_RUN = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
DOCKER_TEST_LABELS = {DOCKER_TEST_LABEL: DOCKER_TEST_RUN}

# ---- host-memory OOM under an address-space limit (LocalLauncher, RLIMIT_AS) ----------
AS_MARGIN_BYTES = 24 * 2**20


@pytest.fixture()
def one_malloc_arena(monkeypatch):
    """MALLOC_ARENA_MAX=1 for this test and the passes it starts (the launcher keeps a value
    already set): the address space a pass needs then repeats (see ``as_limit_above``)."""
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")


def as_limit_above(batch1_peak_vm_bytes: int) -> int:
    """RLIMIT_AS (bytes) that a batch-1 pass fits in and batch 8 on long items at max_length
    512 does not: batch 1's unlimited VmPeak plus ``AS_MARGIN_BYTES``.

    Needs the ``one_malloc_arena`` fixture (AssertionError otherwise). Measured on this
    machine (2 cores, demo model, threads 1): with one malloc arena batch 1's peak repeats
    within 10 MiB and batch 8 runs out of memory on its first long batch even at plus
    40 MiB; with two arenas (the launcher's default) batch 1's peak varied by 15 MiB and
    batch 8's by 50 MiB, and batch 8 once fitted under a plus-48-MiB limit.
    """
    assert os.environ.get("MALLOC_ARENA_MAX") == "1", "use the one_malloc_arena fixture"
    return int(batch1_peak_vm_bytes) + AS_MARGIN_BYTES


# A container memory limit that the batch-1 pass fits and the batch-OOM_BATCH pass does not,
# on oom_corpus_rows() at max_length 512 (threads 2, warm-up 8 items). Measured on the CPU
# image as the container's memory cgroup peak without a limit (memory.max_usage_in_bytes,
# cgroup v1, 2-core host under load from other test sessions):
#   batch 1:                                                303-308 MiB
#   batch 8 on 8 long items (8 x 512 tokens):               385-423 MiB (killed at 360, completes at 390)
#   batch 32, second batch padded to 512 tokens (32 x 512): 629-734 MiB (killed at 450 after 32 items)
# Batch 8 x 512 needs only ~80 MiB more than batch 1 (SDPA attention materializes no
# batch x heads x 512 x 512 scores), so no limit separates them with a margin that holds
# under load; 450 MiB leaves ~140 MiB above batch 1 and at least ~180 MiB below batch 32.
OOM_BATCH = 32
OOM_LIMIT_BYTES = int(os.environ.get("ITERALAB_TEST_OOM_LIMIT") or 450 * 2**20)


def oom_corpus_rows() -> list[dict]:
    """64 demo items: 32 short, then 28 medium and the 4 longest long ones (truncated to 512).

    At batch OOM_BATCH the first batch (32 short items) completes and the second, padded to
    512 tokens by its long items (padding "longest"), exceeds OOM_LIMIT_BYTES; batch 1 never
    holds more than one item.
    """
    rows = demo_rows()
    by = {b: [r for r in rows if r["bucket"] == b] for b in ("short", "medium", "long")}
    return by["short"][:32] + by["medium"][:28] + sorted(by["long"], key=lambda r: -r["n_tokens"])[:4]


@pytest.fixture(scope="session")
def docker_client():
    """A docker client on a live engine (skip with the reason when none answers); removes,
    at the end of the session, the containers this session labelled (DOCKER_TEST_LABELS)."""
    docker = pytest.importorskip("docker")
    try:
        c = docker.from_env(timeout=60)
        c.ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine reachable ({type(exc).__name__}: {exc}); run scripts/ci_docker.sh")
    yield c
    for ctr in c.containers.list(all=True, filters={"label": f"{DOCKER_TEST_LABEL}={DOCKER_TEST_RUN}"}):
        try:
            ctr.remove(force=True)
        except docker.errors.NotFound:
            pass  # removed meanwhile (by the launcher's own clean-up)
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: its removal is already in progress
                raise


def run_scp_lines(text: str) -> list[str]:
    """The arguments ``scp`` receives when the lines of ``text`` (the Archive screen's scp
    command, as shown) are pasted into a POSIX shell: scp itself is a shell function that
    prints them, so nothing is copied."""
    script = "scp() { for a in \"$@\"; do printf '%s\\n' \"$a\"; done; }\n" + text + "\n"
    out = subprocess.run(["sh", "-e"], input=script, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()
