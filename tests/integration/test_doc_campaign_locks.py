"""The guide's own walk-through runs (issue 37, part 5): docs/campaign-file.md's complete campaign
file and the commands under it (`iteralab corpus build ...`, `iteralab protocol lock ...`), read
from the page and run as written, in a folder laid out as the page says (a tickets source, the
model folder `models/my-classifier`: here the demo classifier, and the demo corpus's texts as
the tickets). The file declares `device = "cuda"`: on this CPU host the lock refuses exactly that,
in one line, and with the device the host has it locks."""

from __future__ import annotations

import shlex

from conftest import COMPARISON, REPO

GUIDE = REPO / "docs" / "campaign-file.md"


def guide_parts() -> tuple[str, list[list[str]]]:
    """(the page's complete campaign file, its `iteralab ...` command lines as argument lists)."""
    from test_doc_examples import toml_blocks

    text = GUIDE.read_text(encoding="utf-8")
    [campaign] = [b for b in toml_blocks(text) if b.startswith("[campaign]")]
    commands = [shlex.split(line.strip())[1:] for line in text.splitlines()
                if line.startswith("    iteralab ")]
    return campaign, commands


def test_the_campaign_file_guide_builds_its_corpus_and_locks(tmp_path, model_dir, monkeypatch, capsys):
    from lab.cli import main

    campaign, commands = guide_parts()
    assert [c[:2] for c in commands] == [["corpus", "build"], ["protocol", "lock"]], commands
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "my-classifier").symlink_to(model_dir)
    (tmp_path / "tickets.jsonl").write_text("".join(COMPARISON.read_text(encoding="utf-8").splitlines(True)[:120]))
    (tmp_path / "campaign.toml").write_text(campaign, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    build, lock = commands
    assert main(build) == 0, capsys.readouterr().err
    assert (tmp_path / "my-corpus" / "comparison.jsonl").is_file()
    capsys.readouterr()
    assert main(lock) == 2  # device = "cuda" on a host without a GPU: the one refusal, one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "device 'cuda' needs GPU index 0" in err[0] and 'use device = "cpu"' in err[0], err
    (tmp_path / "campaign.toml").write_text(campaign.replace('device = "cuda"', 'device = "cpu"'), encoding="utf-8")
    assert main(lock) == 0, capsys.readouterr().err
    assert "locked" in capsys.readouterr().out.lower()
