#!/bin/sh
# expect_failure.sh SECONDS PATTERN COMMAND...: passes when COMMAND exits non-zero within
# SECONDS (a hang is a failure) and its output contains PATTERN. For jobs that must fail, such
# as an MPI job one of whose ranks fails.
limit=$1 pattern=$2
shift 2
log=$(mktemp)
timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
rc=$?
cat "$log"
found=0
grep -q -- "$pattern" "$log" && found=1
rm -f "$log"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "expect_failure: FAIL: still running after $limit s (a hang), killed" >&2
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "expect_failure: FAIL: the command succeeded; it was expected to fail" >&2
  exit 1
fi
if [ "$found" -eq 0 ]; then
  echo "expect_failure: FAIL: exit $rc, but the output lacks '$pattern'" >&2
  exit 1
fi
echo "expect_failure: ok: exit $rc, '$pattern' reported"
