"""The lab deletes only a vLLM venv folder it built and can prove it built (issue 34, part 3):
``ITERALAB_VLLM_VENV`` naming a folder of the user's, without the lab's stamp, is refused in one
line and nothing in it is touched."""

from __future__ import annotations

import pytest

from lab.engines import vllm_env


def test_a_folder_the_lab_did_not_build_is_refused_and_kept(tmp_path, monkeypatch):
    mine = tmp_path / "my-project"
    (mine / "src").mkdir(parents=True)
    (mine / "src" / "notes.txt").write_text("keep me")
    (mine / "bin").mkdir()
    monkeypatch.setenv(vllm_env.VENV_ENV, str(mine))
    with pytest.raises(vllm_env.VllmEnvError) as exc:
        vllm_env.ensure_vllm_env()
    msg = str(exc.value)
    assert "\n" not in msg and str(mine) in msg and "will not delete it" in msg and vllm_env.VENV_ENV in msg
    assert (mine / "src" / "notes.txt").read_text() == "keep me" and (mine / "bin").is_dir()


def test_a_file_named_as_the_venv_is_refused_and_kept(tmp_path, monkeypatch):
    f = tmp_path / "venv"
    f.write_text("not a folder")
    monkeypatch.setenv(vllm_env.VENV_ENV, str(f))
    with pytest.raises(vllm_env.VllmEnvError, match="is not a folder the lab made"):
        vllm_env.ensure_vllm_env()
    assert f.read_text() == "not a folder"


@pytest.mark.parametrize("proof", ["absent", "empty", "mark", "stale stamp"])
def test_a_folder_the_lab_built_or_nothing_at_all_may_be_rebuilt(tmp_path, proof):
    v = tmp_path / "venv"
    if proof != "absent":
        v.mkdir()
    if proof == "mark":
        (v / vllm_env.BUILT_MARK).write_text("x")
        (v / "lib").mkdir()
    if proof == "stale stamp":
        (v / vllm_env.STAMP_NAME).write_text("0" * 64 + "\n")
        (v / "lib").mkdir()
    assert vllm_env.built_by_someone_else(v) == ""


def test_a_build_writes_the_mark_first(tmp_path, monkeypatch):
    """The mark is written before any step runs, so a build that fails half-way leaves a folder
    the next build may delete; here the first step (creating the venv) fails."""
    v = tmp_path / "venv"
    req = tmp_path / "requirements.txt"
    req.write_text("x==1 --hash=sha256:" + "0" * 64 + "\n")
    seen = {}

    def failing_run(cmd, **kwargs):
        seen["mark"] = (v / vllm_env.BUILT_MARK).is_file()

        class R:
            returncode = 1
        return R()

    monkeypatch.setattr(vllm_env.subprocess, "run", failing_run)
    with pytest.raises(vllm_env.VllmEnvError, match="could not be built"):
        vllm_env.build(v, req, log=tmp_path / "venv.log")
    assert seen == {"mark": True}


def test_make_vllm_env_says_what_it_does_before_each_step(tmp_path, monkeypatch, capsys):
    """Issue 35 item 7: `make vllm-env` printed nothing for minutes (a user stopped it). It says
    what it builds, then each step as it starts, with where pip's output goes."""
    req = tmp_path / "requirements-vllm.txt"
    req.write_text("x==1 --hash=sha256:" + "0" * 64 + "\n")
    monkeypatch.setenv(vllm_env.VENV_ENV, str(tmp_path / "venv"))
    monkeypatch.setattr(vllm_env, "requirements_file", lambda: req)
    calls = []

    def run(cmd, **kwargs):  # the first two steps succeed, pip's install fails
        calls.append(cmd)

        class R:
            returncode = 0 if len(calls) < 2 else 1
        return R()

    monkeypatch.setattr(vllm_env.subprocess, "run", run)
    assert vllm_env.main() == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"vllm-env: building {tmp_path / 'venv'} from requirements-vllm.txt")
    assert out[1] == f"vllm-env: step 1/4: create the venv (output in {tmp_path / 'venv'}.log)"
    assert out[2].startswith("vllm-env: step 2/4: install requirements-vllm.txt") and len(out) == 3


def test_the_recipe_runs_on_the_bare_interpreter_without_the_labs_venv():
    """`make vllm-env` runs lab.engines.vllm_env with the system python3 (no site-packages), so
    .ci/run builds the vLLM venv beside the lab's venv; an import beyond the standard library
    would break that."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(vllm_env.__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, '.'); "
                          "import lab.engines.vllm_env as v; print(sorted(m for m in sys.modules if m.split('.')[0] "
                          "not in sys.stdlib_module_names and m.split('.')[0] not in ('lab', '__main__')))"],
                         cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
