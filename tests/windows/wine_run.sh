#!/bin/sh
# Runs one test program under Wine (the ctest emulator of tests/windows).
# Wine's client can lose the wine server when a test starts while the
# server of the one before is shutting down ("wine client error: ...
# Connection reset by peer", seen once in about 20 runs of the stage): that
# run says nothing about freeway, so it is run once more, and says so.
err=$(mktemp) || exit 1
"$@" 2>"$err"
rc=$?
if [ "$rc" -ne 0 ] && grep -q "wine client error" "$err"; then
  cat "$err" >&2
  echo "wine_run.sh: Wine lost its server; running the test once more" >&2
  "$@"
  rc=$?
else
  cat "$err" >&2
fi
rm -f "$err"
exit "$rc"
