#!/usr/bin/env bash
# `.ci/run` in N fresh clones of this checkout's HEAD, one after another, each recorded in outputs/loop/ by
# .ci/loop_record.py (a timing is evidence, not a test); CI=true, as .ci/run sets it. With BUSY=K, clone number K runs while another process
# keeps one core busy the whole time (a loaded CI machine: the suite must not depend on an idle core).
#
#   .ci/fresh_clones.sh 5            # five clones, none loaded
#   BUSY=3 .ci/fresh_clones.sh 5     # the third under load
#   TARGET=test-quick .ci/fresh_clones.sh 1   # the feedback loop; default: make test (what CI runs, .ci/run)
#
# Never edit this file while a loop runs it: bash reads a script as it goes (write a new file and rename it).
# Each clone goes to $WORK/clone-<i> (default WORK=/tmp/fresh-clones) and is removed after a green run; a red one
# is kept for reading, and the script goes on to the next (the count of green runs is what it reports).
set -uo pipefail
N=${1:?how many clones, e.g. 5}
BUSY=${BUSY:-0}
TARGET=${TARGET:-test}
WORK=${WORK:-/tmp/fresh-clones}
SRC="$(cd "$(dirname "$0")/.." && pwd)"
SHA="$(git -C "$SRC" rev-parse HEAD)"
mkdir -p "$WORK"
green=0
burner=""
# the busy loop must not outlive the script (a killed loop left it running into the next one's clone)
# and a signal ends the loop (a trap that only cleaned up left a killed loop cloning on beside the next one)
trap '[ -n "$burner" ] && kill "$burner" 2>/dev/null' EXIT
trap 'exit 143' INT TERM HUP
for i in $(seq "$N"); do
  dir="$WORK/clone-$i"; rm -rf "$dir"
  git clone -q "$SRC" "$dir" && git -C "$dir" checkout -q "$SHA" || { echo "clone $i: git clone failed"; continue; }
  burner=""
  if [ "$i" = "$BUSY" ]; then
    # one core at 100 % for as long as the run lasts (sh's busy loop: no Python, nothing to install)
    sh -c 'while :; do :; done' & burner=$!
  fi
  load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
  start=$(date +%s)
  # CI=true as .ci/run exports it (a missing set-up fails instead of skipping)
  ( cd "$dir" && CI=true make "$TARGET" ARGS="--junitxml=$WORK/junit-$i.xml" ) > "$WORK/log-$i.txt" 2>&1
  rc=$?
  wall=$(( $(date +%s) - start ))
  [ -n "$burner" ] && kill "$burner" 2>/dev/null
  note="fresh clone $i of $N of ${SHA:0:7}, warm cache, exit $rc, load average before: $load_before"
  [ -n "$burner" ] && note="$note, one core kept busy by another process (sh busy loop) for the whole run"
  if [ -s "$WORK/junit-$i.xml" ]; then
    python3 "$SRC/.ci/loop_record.py" "$WORK/junit-$i.xml" --wall-s "$wall" --sha "$SHA" --note "$note" --what "make $TARGET" \
      --out "$SRC/outputs/loop"
  fi
  echo "clone $i: exit $rc in ${wall}s$([ -n "$burner" ] && echo ' (one core busy)'): $(tail -1 "$WORK/log-$i.txt")"
  if [ "$rc" = 0 ]; then green=$((green + 1)); rm -rf "$dir"; else echo "  kept $dir and $WORK/log-$i.txt"; fi
done
echo "green: $green of $N (${SHA:0:7})"
[ "$green" = "$N" ]
