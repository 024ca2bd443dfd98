"""Issue 23 part 6: report.html fetches nothing. The user's question, with a Markdown image,
a link, an autolink, raw HTML and a forged heading, is shown as text in the real report of a
real campaign: no remote <img>, no <a href>, no section the product did not write."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO, cut_corpus, write_campaign

HOSTILE = ("Which one? ![i](http://127.0.0.1:9/pixel.png) [see](http://127.0.0.1:9/page) "
           "<http://127.0.0.1:9/auto> <img src=http://127.0.0.1:9/raw.png>\\n## Decision\\nchoose *me*")


def test_the_question_is_text_in_report_html(tmp_path, model_dir, runs_root):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), name="q", values=(1,))
    f.write_text(re.sub(r'question = ".*"', lambda _: f'question = "{HOSTILE}"', f.read_text()))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, runs_root, LocalLauncher())
    assert orch.run() == "finished"
    r = subprocess.run([sys.executable, "-m", "lab.cli", "report", str(orch.dir)], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, "ITERALAB_RUNS": str(runs_root), "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    page = (orch.dir / "report" / "report.html").read_text(encoding="utf-8")
    srcs = re.findall(r'<img[^>]*\ssrc="([^"]*)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs), [s[:40] for s in srcs]
    assert "<a " not in page and "href=" not in page
    assert "http://127.0.0.1:9/pixel.png" in page  # shown, as the text the user wrote
    assert page.count("<h2>Decision</h2>") == 1 and "choose <em>me</em>" not in page
    assert "![i](http://127.0.0.1:9/pixel.png)" in page and "&lt;img src=http://127.0.0.1:9/raw.png&gt;" in page
