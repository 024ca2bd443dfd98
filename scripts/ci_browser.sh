#!/usr/bin/env bash
# Debian packages the report, UI and signature tests need: chromium (report.html opened headless
# by scripts/browser_check.py over the DevTools protocol), tmux (the UI at 80x24 with
# TERM=screen) and openssh-client (ssh-keygen: archive --sign and its checks,
# tests/integration/test_archive_signature.py). Idempotent: installs only what is missing.
# Needs root (apt-get).
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v tmux >/dev/null || missing+=(tmux)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
if ((${#missing[@]})); then
    echo "== ci_browser: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
chromium --version 2>/dev/null | head -1
tmux -V
command -v ssh-keygen
