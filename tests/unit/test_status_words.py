"""Status words live once: lab.passes.events.PassStatus (with its FAILED and FINISHED sets)
and lab.orchestration.status.CampaignState. No module of lab/ or tui/ compares against, keys a table by,
or lists a status word as a string literal (issue 9, "pass statuses are one enum defined
once"; a maintainer's trial found eight such copies).

Checked on the syntax tree: a comparison (==, !=, in, not in) with a status-word literal or
a tuple/list/set holding one; a dict literal keyed by two or more status words; a tuple,
list or set literal of two or more status words. No exemption for event kinds: ``oom`` and
``error`` are also event kinds, spelled ``EventKind.OOM``/``EventKind.ERROR`` (see
tests/unit/test_event_kinds.py), so a bare ``"oom"`` is a defect whichever it means. Not
status words, so not flagged: Docker's own container states in lab/launchers/docker.py.
"""

from __future__ import annotations

import ast

from conftest import engine_trees

from lab.orchestration.status import CampaignState
from lab.passes.events import PassStatus

STATUS_WORDS = {str(s) for s in PassStatus} | {str(s) for s in CampaignState}
DEFINITIONS = {"lab/passes/events.py", "lab/orchestration/status.py"}
OTHER_VOCABULARIES = {"lab/launchers/docker.py": "Docker container states"}


def _words(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in STATUS_WORDS:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [w for e in node.elts for w in _words(e) if isinstance(e, ast.Constant)]
    return []


def status_literals(source: str | ast.Module) -> list[tuple[int, str]]:
    """(line, code) of every status-word literal used as a comparison, table key or list
    (``source``: a module's text or its parsed tree)."""
    found = []
    tree = ast.parse(source) if isinstance(source, str) else source
    in_compare: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            literal = [s for s in sides if _words(s)]
            for s in sides:
                in_compare.add(id(s))
            key_lookup = isinstance(node.left, ast.Constant) and isinstance(node.ops[0], (ast.In, ast.NotIn))
            if literal and not key_lookup:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Dict):
            keys = [w for k in node.keys if k is not None for w in _words(k)]
            if len(keys) >= 2:
                found.append((node.lineno, ast.unparse(node)[:80]))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in in_compare \
                and len(_words(node)) >= 2:
            found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def test_no_status_word_literals_outside_the_enums():
    offences = []
    for rel, _, tree in engine_trees():
        if rel in DEFINITIONS or rel in OTHER_VOCABULARIES:
            continue
        offences += [f"{rel}:{line}: {code}" for line, code in status_literals(tree)]
    assert not offences, "status words spelled out (use PassStatus / CampaignState / FINISHED):\n" + "\n".join(offences)


def test_the_check_sees_each_form():
    """The detector itself: each form the trial found is flagged, the enums and key lookups are
    not; an event kind that is also a status word is flagged too (EventKind spells it)."""
    src = '''
DONE = ("ok", "oom", "error", "killed")
a = x["status"] == "running"
b = row.get("status") != "ok"
c = r["status"] in ("ok", "oom")
d = {"oom": "OOM", "error": "ERROR"}
e = st["state"] != "finished"
f = kind in ("oom", "error")
g = ev["kind"] == "oom"
h = status == PassStatus.OK
i = "error" in facts
SHOWN_EVENTS = ("oom", "error", "interrupted")
j = kind in (EventKind.OOM, EventKind.ERROR)
'''
    lines = {line for line, _ in status_literals(src)}
    assert lines == {2, 3, 4, 5, 6, 7, 8, 9, 12}, status_literals(src)
