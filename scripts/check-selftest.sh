#!/usr/bin/env bash
# The documents and modules checks against their fixtures (scripts/check-fixtures/): each
# passes the tree that is right and fails the one that is wrong with exactly the findings in
# its expected.txt.
#
#   scripts/check-selftest.sh              # the checks of this checkout
#   scripts/check-selftest.sh --old REV    # also: REV's checks pass the wrong trees (blind spots)
set -euo pipefail
cd "$(dirname "$0")/.."
fixtures=scripts/check-fixtures
failed=0

expect() { # expect WHAT RC EXPECTED-FILE-OR-EMPTY COMMAND...
  local what=$1 want=$2 expected=$3 out rc=0
  shift 3
  out=$("$@" 2>/dev/null) || rc=$?
  if [ "$rc" != "$want" ]; then
    echo "check-selftest: $what: exit $rc, wanted $want" >&2
    printf '%s\n' "$out" >&2
    failed=1
  elif [ -n "$expected" ] && ! diff -u "$expected" <(printf '%s\n' "$out") >&2; then
    echo "check-selftest: $what: findings differ from $expected" >&2
    failed=1
  fi
}

expect "check-docs passes docs/right.md" 0 "" \
  scripts/check-docs.sh --root "$fixtures/docs" docs/right.md
expect "check-docs fails docs/wrong.md" 1 "$fixtures/docs/expected.txt" \
  scripts/check-docs.sh --root "$fixtures/docs" docs/wrong.md
expect "check-modules passes modules-right" 0 "" \
  python3 scripts/check-modules.py --root "$fixtures/modules-right"
expect "check-modules fails modules-wrong" 1 "$fixtures/modules-wrong/expected.txt" \
  python3 scripts/check-modules.py --root "$fixtures/modules-wrong"

if [ "${1:-}" = --old ]; then
  # The old scripts find the repository from their own place, so each runs from a copy of a
  # fixture tree.
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  cp -r "$fixtures/docs" "$fixtures/modules-wrong" "$scratch/"
  for tree in docs modules-wrong; do
    mkdir -p "$scratch/$tree/scripts"
    git show "$2:scripts/check-docs.sh" > "$scratch/$tree/scripts/check-docs.sh"
    git show "$2:scripts/check-modules.py" > "$scratch/$tree/scripts/check-modules.py"
  done
  expect "$2's check-docs passes docs/wrong.md" 0 "" \
    bash "$scratch/docs/scripts/check-docs.sh" docs/wrong.md
  expect "$2's check-modules passes modules-wrong" 0 "" \
    python3 "$scratch/modules-wrong/scripts/check-modules.py"
fi

if [ "$failed" != 0 ]; then exit 1; fi
echo "check-selftest: both checks pass their right fixtures and fail their wrong ones"
