"""The campaign file alone: parsing and its one-line errors. No model is built or loaded (the
[model] path is never opened by parsing; locking checks the model, see tests/integration/test_engine_protocol.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cut_corpus, write_campaign

from lab.orchestration.protocol import ProtocolError, load_protocol

UNBUILT_MODEL = Path("/nonexistent/model-not-needed-to-parse")


@pytest.mark.parametrize("edit, message", [
    (("metric = \"accuracy\"", "metric = \"bleu\""), "metric 'bleu' unknown; use accuracy or macro_f1"),
    (("metric = \"accuracy\"", "metric = \"acuracy\""), "metric 'acuracy' unknown; did you mean 'accuracy'\\?$"),
    (("metric = \"accuracy\"", "metric = \"nn_acc\""), "metric 'nn_acc' unknown; did you mean 'nn_accuracy'\\?$"),
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


@pytest.mark.parametrize("spelling", ["bucketing/bucketing=true", "bucketing/bucketing=True"])
def test_reference_variant_with_a_boolean_value_in_either_spelling(tmp_path, spelling):
    """A user types TOML's `true`; names are written 'bucketing=True': both name the variant."""
    f = write_campaign(tmp_path, UNBUILT_MODEL, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    text = f.read_text()
    text = text.replace("reference_variant = \"batch/batch_size=1\"", f"reference_variant = \"{spelling}\"")
    text += "\n[[series]]\nname = \"bucketing\"\nfactor = \"bucketing\"\nvalues = [false, true]\nbatch_size = 8\n"
    f.write_text(text)
    proto = load_protocol(f)
    assert proto.reference.bucketing is True and proto.reference.name == "bucketing/bucketing=True"
    f.write_text(text.replace(spelling, "bucketing/bucketing=yes"))
    with pytest.raises(ProtocolError, match="is not a declared variant"):
        load_protocol(f)


def test_revision_next_to_a_local_model_path_is_refused(tmp_path):
    """[model] revision applies to a hub id only; next to [model] path it would be silently
    ignored (the folder is identified by its files' sha256), so the file is refused."""
    f = write_campaign(tmp_path, UNBUILT_MODEL, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    f.write_text(f.read_text().replace(f'path = "{UNBUILT_MODEL}"',
                                       f'path = "{UNBUILT_MODEL}"\nrevision = "v1.0"'))
    with pytest.raises(ProtocolError, match=r"\[model\] revision = 'v1.0' does not apply to \[model\] path "
                                            r".*files' sha256\); remove revision") as e:
        load_protocol(f)
    assert "\n" not in str(e.value)
    f.write_text(f.read_text().replace(f'path = "{UNBUILT_MODEL}"', 'id = "org/name"'))
    assert load_protocol(f).config.model.revision == "v1.0"  # with a hub id it is taken
