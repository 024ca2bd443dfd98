"""The lock history (campaign.lock.json) is rewritten through a temporary name and a rename
(lab.facts.diskfull.atomic_write_text): a write that fails half-way leaves the previous history whole
and no temporary behind, and the next lock appends as if nothing had happened."""

from __future__ import annotations

import errno
import json
import os

import pytest
from conftest import cut_corpus, write_campaign

from lab.facts.diskfull import DiskFull
from lab.orchestration.protocol import load_protocol, lock, lock_path, read_lock


def test_a_lock_write_that_fails_keeps_the_old_history_whole(tmp_path, fake_model, monkeypatch):
    f = write_campaign(tmp_path, fake_model, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    assert lock(load_protocol(f), check=False)["version"] == 1
    before = lock_path(f).read_bytes()
    f.write_text(f.read_text().replace("repetitions = 1", "repetitions = 2"))  # a new version to record

    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", disk_full)  # the new history is written, then cannot be flushed
        with pytest.raises(DiskFull, match="no space left on device"):
            lock(load_protocol(f), check=False)
    assert lock_path(f).read_bytes() == before  # the old history, byte for byte
    assert [v["version"] for v in json.loads(before)["versions"]] == [1]
    assert not list(tmp_path.glob("*.partial"))
    assert lock(load_protocol(f), check=False)["version"] == 2
    assert [v["version"] for v in read_lock(f)] == [1, 2]
