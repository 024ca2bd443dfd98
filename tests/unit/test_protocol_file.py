"""The campaign file alone: parsing and its one-line errors. No model is built or loaded (the
[model] path is never opened by parsing; locking checks the model, see tests/test_engine_protocol.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import cut_corpus, write_campaign
from lab.protocol import ProtocolError, load_protocol

UNBUILT_MODEL = Path("/nonexistent/model-not-needed-to-parse")


@pytest.mark.parametrize("edit, message", [
    (("metric = \"accuracy\"", "metric = \"bleu\""), "metric 'bleu' unknown"),
    (("reference_variant = \"batch/batch_size=1\"", "reference_variant = \"batch/batch_size=2\""),
     "is not a declared variant"),
    (("repetitions = 1", "repetitions = 0"), "repetitions must be >= 1"),
    (("[[series]]", "[[series]]\nbroken ="), "not valid TOML"),
])
def test_bad_campaign_file_one_line(tmp_path, edit, message):
    f = write_campaign(tmp_path, UNBUILT_MODEL, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    f.write_text(f.read_text().replace(*edit))
    with pytest.raises(ProtocolError, match=message) as e:
        load_protocol(f)
    assert "\n" not in str(e.value)
