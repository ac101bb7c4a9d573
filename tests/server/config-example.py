#!/usr/bin/env python3
"""config/strata.conf documents every option of the table and loads cleanly.

usage: config-example.py STRATA_BIN CONFIG_FILE
Checks: every option `strata serve --help` lists appears in the example as a
`name = value` line (commented or not) with the table's default; the file
loads (`--print-config`, exit 0) and its uncommented lines take effect with
source "file"; an invalid value in a config file stops start-up with exit 2
and names the option and the allowed range.
"""
import os
import re
import subprocess
import sys
import tempfile

strata, example = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL %s %s" % (name, detail))


env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
helptext = subprocess.run([strata, "serve", "--help"], capture_output=True, text=True, env=env).stdout
opts = re.findall(r"^\s+(?:-\w+, )?--(\S+)\s+.*\(default: (.*?); env \S+\)$", helptext, re.M)
check("help lists options", len(opts) >= 20, str(len(opts)))
text = open(example, encoding="utf-8").read()
for name, default in opts:
    if name == "config":
        continue
    m = re.search(r"^#? ?%s =(?: (.*))?$" % re.escape(name), text, re.M)
    check("example has " + name, m is not None)
    if m and not m.group(0).startswith("#"):
        continue
    if m and default != "none":
        check("example default of " + name, (m.group(1) or "") == default, "%r vs %r" % (m.group(1), default))

r = subprocess.run([strata, "serve", "--config", example, "--print-config"], capture_output=True,
                   text=True, env=env)
check("example loads", r.returncode == 0, r.stderr)
for name in re.findall(r"^([a-z-]+) = ", text, re.M):
    line = re.search(r"^%s\s+=.*\((\w+)(?:: [^)]*)?\)$" % re.escape(name), r.stdout, re.M)
    check("example value of %s used" % name, line is not None and line.group(1) in ("file", "affinity", "cgroup"),
          line.group(0) if line else r.stdout[:200])

with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
    f.write("# bad\nport = 70000\n")
bad = subprocess.run([strata, "serve", "--config", f.name, "--print-config"], capture_output=True,
                     text=True, env=env)
os.unlink(f.name)
check("invalid value exits 2", bad.returncode == 2, str(bad.returncode))
check("invalid value names option and range", "port" in bad.stderr and "65535" in bad.stderr, bad.stderr)

print("RESULT config-example: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
