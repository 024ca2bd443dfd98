"""Who made an archive (issue 34 part 1): consistency cannot catch an archive rewritten member by
member, a signature can. On real archives of this test session and keys made here with
ssh-keygen: `archive --sign KEY` writes ARCHIVE.sig; `archive verify`, compare and replay name the
signer from the user's allowed-signers file, say "unsigned" for an archive without a signature,
never claim a signer without that file, and refuse an archive changed by one byte since it was
signed or signed by a key the file does not list."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.compare import compare_archives
from lab.evidence.signature import SignatureError, sign_archive
from lab.facts.files import sha256_file
from lab.facts.signing import SIGNATURE_NAMESPACE, signature_path

REPO = Path(__file__).resolve().parents[2]
WINDOW = ["--window-start", "2026-12-01T09:00+01:00", "--deadline", "2026-12-05T09:00+01:00", "--allow-short"]
ALICE = "alice@example.org"


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    """Two ed25519 keys without passphrase (alice, mallory) and an allowed-signers file listing
    alice's only."""
    d = tmp_path_factory.mktemp("keys")
    for name in ("alice", "mallory"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(d / name)], check=True)
    allowed = d / "allowed_signers"
    allowed.write_text(f"{ALICE} {' '.join((d / 'alice.pub').read_text().split()[:2])}\n")
    return {"alice": d / "alice", "mallory": d / "mallory", "allowed": allowed}


@pytest.fixture()
def env(tmp_path) -> dict:
    """The environment of a CLI run with no allowed-signers file at the default location."""
    return {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def cli(*args, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)


def copied(archive: Path, folder: Path, name: str | None = None) -> Path:
    """A copy of a session archive (signing writes beside it; the session's own stay unsigned)."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(archive, folder / (name or archive.name)))


def campaign_copy(archive: Path, tmp_path: Path) -> Path:
    """A copy of the campaign folder a session archive was packed from (packing writes beside it)."""
    folder = next(d for d in archive.parent.iterdir() if (d / "journal.sqlite").is_file())
    return Path(shutil.copytree(folder, tmp_path / "runs" / archive.parent.name / folder.name))


def signature_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("signature: "))


def test_signed_archive_round_trip(two_rentals, keys, env, tmp_path):
    """Sign at packing, verify naming the signer, then one byte changed: refused."""
    campaign = campaign_copy(two_rentals[0], tmp_path)
    r = cli("archive", campaign, "--sign", keys["alice"], env=env)
    assert r.returncode == 0, r.stderr
    archive = Path(r.stdout.splitlines()[-1])
    sig = signature_path(archive)
    assert sig.is_file() and f"signed: {sig}" in r.stdout
    # the sha256 printed is the signed bytes': nothing inside changed
    assert f"sha256 {sha256_file(archive)}" in r.stdout
    # the pair checks with ssh-keygen alone, in the lab's namespace
    with open(archive, "rb") as fh:
        alone = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(keys["allowed"]), "-I", ALICE,
                                "-n", SIGNATURE_NAMESPACE, "-s", str(sig)], stdin=fh, capture_output=True, text=True)
    assert alone.returncode == 0, alone.stderr

    r = cli("archive", "verify", archive, "--allowed-signers", keys["allowed"], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert signature_line(r.stdout).startswith(f"signature: signed by {ALICE} (ED25519 key SHA256:")
    assert r.stdout.splitlines()[-1].startswith("OK: ")

    default = Path(env["XDG_CONFIG_HOME"]) / "iteralab" / "allowed_signers"  # no --allowed-signers: none there
    r = cli("archive", "verify", archive, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    line = signature_line(r.stdout)
    assert line.startswith("signature: signed, signer not checked (no allowed-signers file)"), line
    assert "signed by" not in r.stdout and str(default) in line
    default.parent.mkdir(parents=True)
    shutil.copyfile(keys["allowed"], default)  # the default location, used without the option
    r = cli("archive", "verify", archive, env=env)
    assert signature_line(r.stdout).startswith(f"signature: signed by {ALICE} "), r.stdout
    default.unlink()

    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one byte
    changed = tmp_path / "changed" / archive.name
    changed.parent.mkdir()
    changed.write_bytes(bytes(data))
    shutil.copyfile(sig, signature_path(changed))
    for extra in (["--allowed-signers", keys["allowed"]], []):  # refused whether or not a signer is checked
        r = cli("archive", "verify", changed, *extra, env=env)
        out = r.stdout.strip()
        assert r.returncode == 2 and "\n" not in out, out
        assert out.startswith(f"FAILED: {changed.name}: its signature {changed.name}.sig does not verify "), out
        assert "download both again" in out


def test_a_key_not_in_the_allowed_signers_file_is_refused(two_rentals, keys, env, tmp_path):
    archive = copied(two_rentals[0], tmp_path / "m")
    sign_archive(archive, keys["mallory"])
    r = cli("archive", "verify", archive, "--allowed-signers", keys["allowed"], env=env)
    out = r.stdout.strip()
    assert r.returncode == 2 and "\n" not in out, out
    assert f"{archive.name}: signed by ED25519 key SHA256:" in out and f"{keys['allowed']} does not list" in out
    # without an allowed-signers file the same signature is never called verified
    r = cli("archive", "verify", archive, env=env)
    assert r.returncode == 0 and "signer not checked" in signature_line(r.stdout)
    # compare refuses it too, before comparing anything
    other = copied(two_rentals[1], tmp_path / "m")
    with pytest.raises(SignatureError, match="does not list"):
        compare_archives([archive, other], 50000, allowed_signers=keys["allowed"],
                         window_start="2026-12-01T09:00+01:00", allow_short=True)


def test_compare_names_each_archives_signer_or_unsigned(two_rentals, keys, env, tmp_path):
    signed = copied(two_rentals[0], tmp_path / "a")
    unsigned = copied(two_rentals[1], tmp_path / "b")
    sign_archive(signed, keys["alice"])
    out = tmp_path / "cmp"
    r = cli("compare", signed, unsigned, "--load", 50000, *WINDOW, "--allowed-signers", keys["allowed"],
            "--out", out, env=env)
    assert r.returncode == 0, r.stderr
    verified = {line.split("verified ", 1)[1].split(":")[0]: line for line in r.stdout.splitlines()
                if ". verified " in line}
    name_signed, name_unsigned = (p.name.removesuffix(".tar.gz") for p in (signed, unsigned))
    assert f", signed by {ALICE} (ED25519 key SHA256:" in verified[name_signed], verified
    assert " raw rows, unsigned; " in verified[name_unsigned], verified
    decision = (out / "decision.md").read_text()
    assert f"signed by {ALICE}" in decision and "files), unsigned" in decision


def test_replay_names_the_signer_and_refuses_a_changed_signature(two_rentals, keys, env, tmp_path):
    archive = copied(two_rentals[0], tmp_path / "a")
    sign_archive(archive, keys["alice"])
    r = cli("campaign", "replay", archive, "--out", tmp_path / "r1" / "campaign.toml",
            "--allowed-signers", keys["allowed"], env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"verified {archive.name} (signed by {ALICE} (ED25519 key SHA256:"), r.stdout
    forged = copied(two_rentals[1], tmp_path / "b", archive.name)  # another archive under the signed one's name
    shutil.copyfile(signature_path(archive), signature_path(forged))
    r = cli("campaign", "replay", forged, "--out", tmp_path / "r2" / "campaign.toml",
            "--allowed-signers", keys["allowed"], env=env)
    err = r.stderr.strip()
    assert r.returncode == 2 and "\n" not in err and "does not verify" in err, err
    assert not (tmp_path / "r2" / "campaign.toml").exists()


def test_without_ssh_keygen_sign_names_the_package_and_verify_checks_nothing(two_rentals, keys, env, tmp_path):
    archive = copied(two_rentals[0], tmp_path / "a")
    sign_archive(archive, keys["alice"])
    bare = {**env, "PATH": str(tmp_path / "empty")}  # no ssh-keygen on it (python is run by its full path)
    campaign = campaign_copy(two_rentals[0], tmp_path)
    r = cli("archive", campaign, "--sign", keys["alice"], env=bare)
    err = r.stderr.strip()
    assert r.returncode == 2 and "\n" not in err and "ssh-keygen not found" in err and "openssh-client" in err, err
    assert not list(campaign.parent.glob("*.tar.gz"))  # checked before anything was packed
    r = cli("archive", "verify", archive, "--allowed-signers", keys["allowed"], env=bare)
    assert r.returncode == 0, r.stdout + r.stderr
    assert signature_line(r.stdout).startswith("signature: signature not checked: ssh-keygen not found; install "
                                               "openssh-client"), r.stdout


def test_a_key_ssh_keygen_cannot_use_leaves_no_archive(two_rentals, env, tmp_path):
    """An archive asked signed is signed or not kept: packing runs, signing fails, nothing is left."""
    not_a_key = tmp_path / "not-a-key"
    not_a_key.write_text("this is no OpenSSH key\n")
    campaign = campaign_copy(two_rentals[0], tmp_path)
    r = cli("archive", campaign, "--sign", not_a_key, env=env)
    err = r.stderr.strip()
    assert r.returncode == 2 and "\n" not in err, err
    assert f"--sign {not_a_key}: ssh-keygen could not sign " in err and "no archive was kept" in err, err
    assert not [p.name for p in campaign.parent.iterdir() if p.name.endswith((".tar.gz", ".sig", ".partial"))]
