"""Event kinds live once: lab.passes.events.EventKind (the kinds a pass writes on stdout and
those the orchestrator adds to the journal). No module of lab/ or tui/ spells one out as a
string literal where it names a kind ("a fact lives in one place", as for the status words
in test_status_words.py).

Checked on the syntax tree of every module of lab/ and tui/ (lab/passes/events.py included:
its enum body assigns the values, which is none of the forms below):
- a comparison (==, !=, in, not in, is) with an event-kind literal or a tuple/list/set holding
  one; ``"error" in facts`` (a key lookup) is not one, unless the container's name says it
  holds kinds or events (``"oom" in SHOWN_EVENTS``);
- a ``match`` case on an event-kind literal;
- the kind argument of ``.emit(kind, ...)`` / ``.add_event(pass_id, kind, ...)`` (or an
  ``event=``/``kind=`` keyword) given as any string literal, a known kind or not;
- a dict literal keyed by event kinds (two or more keys, all of them kinds; a record with
  fields named ``card`` and ``error`` is not one), or holding an event-kind literal under
  the key ``"event"`` or ``"kind"``;
- a tuple, list or set literal of two or more event kinds.
"""

from __future__ import annotations

import ast

from conftest import engine_trees

from lab.passes.events import EventKind

EVENT_KINDS = {str(k) for k in EventKind}
KIND_ARGUMENT = {"emit": 0, "add_event": 1}  # position of the kind among a call's arguments
KIND_KEYWORDS = {"event", "kind"}


def _words(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in EVENT_KINDS:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [w for e in node.elts if isinstance(e, ast.Constant) for w in _words(e)]
    return []


def _names_kinds(node: ast.AST) -> bool:
    text = ast.unparse(node).lower()
    return "kind" in text or "event" in text


def _called(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return node.func.id if isinstance(node.func, ast.Name) else None


def kind_literals(source: str | ast.Module) -> list[tuple[int, str]]:
    """(line, code) of every event kind spelled as a literal where it names a kind (``source``: a
    module's text or its parsed tree)."""
    found = []
    tree = ast.parse(source) if isinstance(source, str) else source
    counted: set[int] = set()  # literal collections already judged as part of a larger form
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            counted.update(id(s) for s in sides)
            if not any(_words(s) for s in sides):
                continue
            key_lookup = (isinstance(node.left, ast.Constant) and isinstance(node.ops[0], (ast.In, ast.NotIn))
                          and not _words(node.comparators[0]) and not _names_kinds(node.comparators[0]))
            if not key_lookup:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue) \
                and _words(node.pattern.value):
            found.append((node.pattern.lineno, f"case {ast.unparse(node.pattern)}"))
        elif isinstance(node, ast.Call) and _called(node) in KIND_ARGUMENT:
            pos = KIND_ARGUMENT[_called(node)]  # type: ignore[index]
            args = node.args[pos:pos + 1] + [k.value for k in node.keywords if k.arg in KIND_KEYWORDS]
            for a in args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    found.append((node.lineno, ast.unparse(node)[:80]))
        elif isinstance(node, ast.Dict):
            keys = [w for k in node.keys if k is not None for w in _words(k)]
            tagged = [v for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)
                      and k.value in KIND_KEYWORDS and _words(v)]
            table = len(keys) >= 2 and len(keys) == len(node.keys)  # a record with an "error" field is not
            if table or tagged:
                found.append((node.lineno, ast.unparse(node)[:80]))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in counted \
                and len(_words(node)) >= 2:
            found.append((node.lineno, ast.unparse(node)[:80]))
    return sorted(set(found))


def test_no_event_kind_literals_in_lab_or_tui():
    offences = []
    for rel, _, tree in engine_trees():
        offences += [f"{rel}:{line}: {code}" for line, code in kind_literals(tree)]
    assert not offences, "event kinds spelled out (use lab.passes.events.EventKind):\n" + "\n".join(offences)


def test_the_check_sees_each_form():
    """The detector itself: each form is flagged; the enum, other words and key lookups are not."""
    src = '''
SHOWN_EVENTS = ("start", "end", "oom", "leftover")
a = ev.get("event") == "progress"
b = kind in ("oom", "error")
c = ev["kind"] != "phase"
ev.emit("result", status=s)
j.add_event(pid, "interrupted", {"pass_id": pid})
d = {"start": f, "end": g}
e = {"event": "card", "rank": 0}
f = "oom" in SHOWN_EVENTS
match kind:
    case "leftover":
        pass
ev.emit("new-kind")
j.add_event(pid, kind="end", payload={})
ok1 = kind == EventKind.PROGRESS
ok2 = kind in (EventKind.OOM, EventKind.ERROR)
ev.emit(EventKind.RESULT, status="ok")
ok3 = "error" in facts
ok4 = {"kind": "local", "path": p}
ok5 = phase_state == "begin"
ok6 = ("start",)
ok7 = {"card": 0, "status": s, "error": None}
'''
    lines = {line for line, _ in kind_literals(src)}
    assert lines == {2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 15}, kind_literals(src)


def test_the_enum_keeps_the_plain_strings():
    """Old journals and archives hold these exact strings: the enum's values never change."""
    assert {"phase", "progress", "oom", "error", "result", "card",
                           "start", "end", "interrupted", "leftover"} == EVENT_KINDS
    assert EventKind.OOM == "oom" and f"{EventKind.LEFTOVER}" == "leftover"
