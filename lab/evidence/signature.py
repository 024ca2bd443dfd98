"""Who made an evidence archive: a detached OpenSSH signature of the archive file's bytes.

``archive verify`` proves an archive whole and in agreement with itself (lab.evidence.verify,
lab.evidence.cross_check); it cannot tell an archive that someone rewrote consistently, member by
member, from the original. A signature can: ``iteralab archive --sign KEY`` signs the archive file
with ``ssh-keygen -Y sign`` in the lab's namespace, and verify, compare and replay check it
against the allowed-signers file the user keeps (``ssh-keygen -Y verify``), naming the signer.

Detached, in ``<archive>.sig`` beside the archive (lab.facts.signing.signature_path), because:
- the archive's bytes are what is signed, so the signature cannot be inside them, and nothing
  inside the archive changes (its sha256, printed by ``archive``, stays the same);
- it is the name ssh-keygen gives a signature of a file, so the pair checks with ssh-keygen
  alone: ``ssh-keygen -Y verify -f ALLOWED -I NAME -n evidence-archive@iteralab -s A.tar.gz.sig < A.tar.gz``;
- an archive copied without its signature is still a whole archive, reported "unsigned".

ssh-keygen runs with the archive on its standard input for checking, and with the archive's path
for signing: then its standard input stays the terminal's, where it asks a key's passphrase (with
the archive on its input it would read the passphrase from the archive).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from lab.evidence.format import UNSIGNED, ArchiveError, Signature, SignatureState
from lab.facts.signing import (
    SIGNATURE_NAMESPACE,
    SSH_KEYGEN,
    SSH_KEYGEN_PACKAGE,
    default_allowed_signers,
    signature_path,
)

KEY_NAMED = re.compile(r" with (\S+ key \S+)")
"""ssh-keygen's 'Good "NS" signature [for NAME] with ED25519 key SHA256:...': the key it names."""


class SignatureError(ArchiveError):
    """An archive's signature that does not verify, an allowed-signers file that cannot be read,
    or a signature that cannot be made; one line saying what to do."""


def signed_key(stdout: str) -> str:
    """The key ssh-keygen names in its 'Good ... signature ... with KEY' line ("ED25519 key
    SHA256:..."); '' when the output names none."""
    m = KEY_NAMED.search(stdout)
    return m.group(1) if m else ""


def why(result: subprocess.CompletedProcess) -> str:
    """ssh-keygen's own reason for a failure: its last line on stderr (else stdout) that is not one
    of its progress lines ("Signing file ..."); 'exit status N' when it printed none."""
    lines = [ln.strip() for ln in (result.stderr or "").splitlines() + (result.stdout or "").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("Signing ", "Write signature"))]
    return lines[-1] if lines else f"exit status {result.returncode}"


def first_principal(stdout: str) -> str:
    """The first name ``ssh-keygen -Y find-principals`` printed (one per line; a line that lists
    several names, comma-separated, gives its first); '' when none."""
    for line in stdout.splitlines():
        name = line.strip().split(",")[0].strip()
        if name:
            return name
    return ""


def _ssh_keygen() -> str | None:
    return shutil.which(SSH_KEYGEN)


def _check(exe: str, args: list[str], data: Path | None = None) -> subprocess.CompletedProcess:
    """ssh-keygen with ``args``, reading ``data`` (the archive) on its standard input, else nothing."""
    if data is None:
        return subprocess.run([exe, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    with open(data, "rb") as fh:
        return subprocess.run([exe, *args], stdin=fh, capture_output=True, text=True, check=False)


def signing_ready(key: str | Path) -> str:
    """The path of ssh-keygen, checked before anything is packed. Raises SignatureError (one line)
    when ssh-keygen is not installed (naming its package) or ``key`` is not a file."""
    exe = _ssh_keygen()
    if exe is None:
        raise SignatureError(f"--sign: {SSH_KEYGEN} not found; install it (Debian, Ubuntu: apt-get install "
                             f"{SSH_KEYGEN_PACKAGE}) or archive without --sign")
    if not Path(key).is_file():
        raise SignatureError(f"--sign {key}: no such key file; give your OpenSSH private key (e.g. ~/.ssh/id_ed25519; "
                             "`ssh-keygen -t ed25519` makes one)")
    return exe


def sign_archive(archive: str | Path, key: str | Path) -> Path:
    """Sign the bytes of ``archive`` with the OpenSSH private key ``key`` (or its public key, when
    the private key is held by ssh-agent) in the lab's namespace: ``ssh-keygen -Y sign``. Writes
    and returns ``<archive>.sig``. A key with a passphrase asks for it on the terminal. Raises
    SignatureError (one line) when ssh-keygen or the key is missing, the signature file exists
    already (never overwritten), or ssh-keygen refuses (its reason quoted); no signature file is
    left then."""
    archive = Path(archive)
    exe = signing_ready(key)
    sig = signature_path(archive)
    if sig.exists():
        raise SignatureError(f"{sig} exists already; a signature is never overwritten: move it away and sign again")
    # standard input inherited: a key's passphrase is read from the terminal (module docstring)
    r = subprocess.run([exe, "-Y", "sign", "-f", str(key), "-n", SIGNATURE_NAMESPACE, str(archive)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0 or not sig.is_file():
        sig.unlink(missing_ok=True)
        raise SignatureError(f"--sign {key}: ssh-keygen could not sign {archive.name} ({why(r)}); give an OpenSSH "
                             "private key you can unlock (`ssh-keygen -t ed25519` makes one)")
    return sig


def allowed_signers_file(given: str | Path | None) -> Path | None:
    """The allowed-signers file to check signatures against: ``given`` (the user's
    ``--allowed-signers``; SignatureError when it is not a file), else the default location
    (lab.facts.signing.default_allowed_signers) when a file is there, else None."""
    if given is not None:
        if not Path(given).is_file():
            raise SignatureError(f"--allowed-signers {given}: no such file; give the file listing the keys you "
                                 "trust to sign archives, one 'NAME KEY-TYPE KEY' line each (as in ~/.ssh/*.pub, "
                                 "prefixed with the signer's name)")
        return Path(given)
    default = default_allowed_signers()
    return default if default.is_file() else None


def check_signature(archive: str | Path, allowed_signers: str | Path | None = None) -> Signature:
    """Who signed ``archive`` (an existing file), from ``<archive>.sig`` beside it:

    - no signature file: UNSIGNED;
    - no ssh-keygen on this host: NOT_CHECKED ("ssh-keygen not found"); nothing is claimed;
    - the signature does not match the archive's bytes (or was made in another namespace):
      SignatureError;
    - no allowed-signers file (``allowed_signers`` None and none at the default location):
      SIGNER_NOT_CHECKED, with the key that signed;
    - a key the allowed-signers file does not list, or a line of it that refuses this signature
      (its namespaces=, valid-after=, valid-before= options): SignatureError;
    - else VERIFIED, ``signer`` the file's name for the key.

    Raises SignatureError (one line saying what to do) as above, and for an ``allowed_signers``
    given that is not a file."""
    archive = Path(archive)
    signers = allowed_signers_file(allowed_signers)  # a mistyped --allowed-signers is said whatever the archive
    sig = signature_path(archive)
    if not sig.is_file():
        return UNSIGNED
    exe = _ssh_keygen()
    if exe is None:
        return Signature(SignatureState.NOT_CHECKED, reason=f"{SSH_KEYGEN} not found")
    r = _check(exe, ["-Y", "check-novalidate", "-n", SIGNATURE_NAMESPACE, "-s", str(sig)], archive)
    if r.returncode != 0:
        raise SignatureError(f"{archive.name}: its signature {sig.name} does not verify ({why(r)}): the archive or "
                             "the signature changed since it was signed; download both again, or ask the signer to "
                             "sign the archive again; until then do not use it")
    key = signed_key(r.stdout)
    if signers is None:
        return Signature(SignatureState.SIGNER_NOT_CHECKED, key=key)
    found = _check(exe, ["-Y", "find-principals", "-f", str(signers), "-s", str(sig)])
    principal = first_principal(found.stdout) if found.returncode == 0 else ""
    if not principal:
        raise SignatureError(f"{archive.name}: signed by {key or 'a key'} that {signers} does not list; if you trust "
                             "its signer, add their public key there as a line 'NAME KEY-TYPE KEY', else do not use "
                             "this archive")
    v = _check(exe, ["-Y", "verify", "-f", str(signers), "-I", principal, "-n", SIGNATURE_NAMESPACE,
                     "-s", str(sig)], archive)
    if v.returncode != 0:
        raise SignatureError(f"{archive.name}: its signature by {principal} ({key}) is refused by {signers} "
                             f"({why(v)}); check that signer's line there (its namespaces=, valid-after=, "
                             "valid-before= options)")
    return Signature(SignatureState.VERIFIED, signer=principal, key=key, allowed_signers=str(signers))
