#!/usr/bin/env python3
"""Sum the `RESULT <name>: N passed, M failed` lines of every meson test.

A test that printed no RESULT line counts as one test (passed, failed or
skipped by its meson result); a test whose RESULT lines claim no failure but
whose process failed (crash, sanitizer report, timeout) adds one failure.
Prints a per-test table and, last, one line `N passed, M failed`.
Exit status 0 only when nothing failed.
"""
import json
import re
import sys

RESULT = re.compile(r"^RESULT (.+?): (\d+) passed, (\d+) failed", re.M)


def main():
    log, extra_pass, extra_fail = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    passed, failed, skipped = extra_pass, extra_fail, 0
    try:
        lines = open(log, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        print("no meson test log at %s" % log)
        lines = []
        failed += 1
    for line in lines:
        if not line.strip():
            continue
        t = json.loads(line)
        out = t.get("stdout", "") or ""
        res = t.get("result", "")
        found = RESULT.findall(out)
        p = sum(int(x[1]) for x in found)
        f = sum(int(x[2]) for x in found)
        if res == "SKIP":
            skipped += 1
            print("  %-32s skipped" % t["name"])
            continue
        if not found:
            if res == "OK" or res == "EXPECTEDFAIL":
                p = 1
            else:
                f = 1
        elif res not in ("OK", "EXPECTEDFAIL") and f == 0:
            f = 1  # crashed, timed out or a sanitizer fired after the suite summary
        passed += p
        failed += f
        print("  %-32s %4d passed %4d failed  (%s, %.1fs)" % (t["name"], p, f, res, t.get("duration", 0)))
    tail = ", %d skipped" % skipped if skipped else ""
    print("%d passed, %d failed%s" % (passed, failed, tail))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
