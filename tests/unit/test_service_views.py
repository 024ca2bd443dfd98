"""lab.service.views' protocol view: a frozen record read from the campaign file and its lock, and the
Protocol screen's text made from its fields. No model is built (the lock's identity is not computed)."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
from conftest import cut_corpus, write_campaign

from lab.orchestration.protocol import lock_path
from lab.service import views
from lab.service.views import LockedVersion, ReplayOrigin
from tui.screens.protocol_screen import render_rules

UNBUILT_MODEL = Path("/nonexistent/model-not-needed-to-parse")


def test_a_replay_lock_entry_without_its_protocol_version_reads_as_a_frozen_record(tmp_path, monkeypatch):
    """A replay entry that does not record the archive's protocol version: the record says None and
    the screen '?'; the question version is the entry's."""
    f = write_campaign(tmp_path, UNBUILT_MODEL, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    entry = {"version": 1, "sha256": "a" * 64, "locked_at": "2026-01-02T03:04:05+00:00", "protocol": {},
             "replays": {"archive": "first.tar.zst", "archive_sha256": "b" * 64, "change": ""},
             "question_version": 2}
    lock_path(f).write_text(json.dumps({"campaign_file": f.name, "versions": [entry]}))
    monkeypatch.setattr(views, "current_version", lambda proto, versions: (versions[0], {}))  # no model hash
    info = views.protocol_info(f)
    assert info.lock_state == "locked" and info.versions == (info.current,)
    assert info.current == LockedVersion(1, "a" * 64, "2026-01-02T03:04:05+00:00",
                                         ReplayOrigin("first.tar.zst", "b" * 64, None, ""), 2)
    assert sum(info.card_counts["long"].values()) == 1  # counted in the corpus: no card
    with pytest.raises(FrozenInstanceError):
        info.lock_state = "edited"  # type: ignore[misc]
    shown = render_rules(info)
    assert "[green b]Locked[/green b] version 1 at 2026-01-02T03:04:05+00:00" in shown
    assert (f"Replays[/b] first.tar.zst (sha256 {'b' * 16}...; its protocol version ?): the same question, "
            "question version 2") in shown
