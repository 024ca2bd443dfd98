"""The words an archive's signer is named with, and what is read from ssh-keygen's output
(lab.evidence.format.Signature, lab.evidence.signature); the signing itself is tested on real
archives in tests/integration/test_archive_signature.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lab.evidence.format import UNSIGNED, Signature, SignatureState
from lab.evidence.signature import first_principal, signed_key, why
from lab.facts.signing import SIGNATURE_SUFFIX, default_allowed_signers, signature_path

KEY = "ED25519 key SHA256:XC4G+kk0SCTfoUu5dAaECa5fsAU1KHd9RP2gcRxhbFA"


def test_each_state_has_its_phrase():
    assert Signature(SignatureState.VERIFIED, signer="alice@example.org", key=KEY).line == \
        f"signed by alice@example.org ({KEY})"
    assert UNSIGNED.line == "unsigned"
    assert Signature(SignatureState.SIGNER_NOT_CHECKED, key=KEY).line == \
        f"signed, signer not checked (no allowed-signers file), {KEY}"
    assert Signature(SignatureState.NOT_CHECKED, reason="ssh-keygen not found").line == \
        "signature not checked: ssh-keygen not found"


def test_only_an_allowed_signers_file_names_a_signer():
    """A signature checked against no file is never worded as a signer: no 'signed by'."""
    for sig in (UNSIGNED, Signature(SignatureState.SIGNER_NOT_CHECKED, key=KEY),
                Signature(SignatureState.NOT_CHECKED, reason="ssh-keygen not found")):
        assert "signed by" not in sig.line


def test_advice_says_where_trusted_keys_go(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    advice = Signature(SignatureState.SIGNER_NOT_CHECKED, key=KEY).advice
    assert str(tmp_path / "iteralab" / "allowed_signers") in advice and "--allowed-signers FILE" in advice
    assert "openssh-client" in Signature(SignatureState.NOT_CHECKED, reason="ssh-keygen not found").advice
    assert UNSIGNED.advice == "" and Signature(SignatureState.VERIFIED, signer="a", key=KEY).advice == ""


def test_the_key_ssh_keygen_names_is_read():
    assert signed_key(f'Good "evidence-archive@iteralab" signature with {KEY}\n') == KEY
    assert signed_key(f'Good "evidence-archive@iteralab" signature for alice@example.org with {KEY}\n') == KEY
    assert signed_key("Could not verify signature.\n") == ""


def test_first_principal_of_find_principals():
    assert first_principal("alice@example.org\n") == "alice@example.org"
    assert first_principal("\nbob@x,carol@y\n") == "bob@x"
    assert first_principal("") == ""


def test_why_is_ssh_keygens_last_reason():
    r = subprocess.CompletedProcess([], 255, stdout="Could not verify signature.\n", stderr="Signing file a.tar.gz\n"
                                    "Signature verification failed: incorrect signature\n")
    assert why(r) == "Could not verify signature."
    r = subprocess.CompletedProcess([], 255, stdout="", stderr="Signing file a.tar.gz\n"
                                    "Couldn't load public key k: No such file or directory\n")
    assert why(r) == "Couldn't load public key k: No such file or directory"
    assert why(subprocess.CompletedProcess([], 1, stdout="", stderr="")) == "exit status 1"


def test_signature_file_is_the_archive_name_with_the_suffix():
    assert signature_path(Path("/runs/t/t-v1-20261201T000000Z.tar.gz")) == \
        Path("/runs/t/t-v1-20261201T000000Z.tar.gz" + SIGNATURE_SUFFIX)
    assert SIGNATURE_SUFFIX == ".sig"  # ssh-keygen -Y sign FILE's own name: checked with ssh-keygen alone


def test_default_allowed_signers_follows_xdg_config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert default_allowed_signers() == tmp_path / "cfg" / "iteralab" / "allowed_signers"
    monkeypatch.setenv("XDG_CONFIG_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_allowed_signers() == tmp_path / "home" / ".config" / "iteralab" / "allowed_signers"
