#!/usr/bin/env bash
# Text captures of the real UI at 80x24 for docs/screens/ (maintainers only).
#
#     bash scripts/capture_screens.sh RUNS_DIR [OUT_DIR]
#
# Opens `python -m tui` (the demo campaign) inside tmux at 80x24 with ITERALAB_RUNS=RUNS_DIR
# (a runs folder where the demo campaign has run, e.g. the one `make demo` filled), visits
# screens 1-7 and writes `tmux capture-pane` of each to OUT_DIR (default docs/screens).
# Screen 8 (Compare) needs two archives and is captured separately. Needs tmux
# (scripts/ci_browser.sh installs it). The UI is quit with `q`; the campaign is not touched.
set -euo pipefail
runs=${1:?usage: capture_screens.sh RUNS_DIR [OUT_DIR]}
out=${2:-docs/screens}
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=$(cd "$runs" && pwd)
mkdir -p "$out"
session="iteralab-capture-$$"
names=(1-environment 2-protocol 3-plan 4-runs 5-results 6-cost 7-archive)
tmux new-session -d -s "$session" -x 80 -y 24 \
    "cd '$repo' && TERM=screen ITERALAB_RUNS='$runs' .venv/bin/python -m tui"
trap 'tmux kill-session -t "$session" 2>/dev/null || true' EXIT
sleep "${CAPTURE_START_S:-15}"  # imports, the environment probe and the journal read
for name in "${names[@]}"; do
    tmux send-keys -t "$session" "${name%%-*}"
    sleep "${CAPTURE_SCREEN_S:-6}"  # the screen's worker (report, quote) posts its result
    tmux capture-pane -p -t "$session" > "$out/$name.txt"
    echo "$out/$name.txt: $(grep -c . "$out/$name.txt") non-empty lines"
done
tmux send-keys -t "$session" q
