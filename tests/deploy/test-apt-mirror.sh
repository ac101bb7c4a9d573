#!/usr/bin/env bash
# tests/deploy/test-apt-mirror.sh: tests/deploy/apt-mirror.sh on made-up apt
# configurations (deb822, one-line with options, none), and that podman.sh
# takes debootstrap's mirror from it instead of a hard-coded host (the
# container test then ran only where that one host was reachable).
# Prints `RESULT apt-mirror: N passed, M failed`.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
passed=0
failed=0
check() { # check NAME GOT WANT
    if [ "$2" = "$3" ]; then
        passed=$((passed + 1))
        echo "ok   $1"
    else
        failed=$((failed + 1))
        echo "FAIL $1: got '$2', want '$3'"
    fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Debian 12's deb822 file: its first URIs: wins (debian-security comes later)
mkdir -p "$tmp/a/etc/apt/sources.list.d"
cat >"$tmp/a/etc/apt/sources.list.d/debian.sources" <<'X'
Types: deb
# a comment line
URIs: http://mirror-a.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror-a.example/debian-security
Suites: bookworm-security
X
check "deb822 debian.sources" "$("$here/apt-mirror.sh" "$tmp/a")" "http://mirror-a.example/debian"

# one-line format with options and a deb-src line first
mkdir -p "$tmp/b/etc/apt"
cat >"$tmp/b/etc/apt/sources.list" <<'X'
# deb http://commented.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] https://mirror-b.example/debian bookworm main
X
check "sources.list deb line with options" "$("$here/apt-mirror.sh" "$tmp/b")" "https://mirror-b.example/debian"

# a deb822 file without URIs falls back to sources.list.d/*.list
mkdir -p "$tmp/c/etc/apt/sources.list.d"
echo "Types: deb" >"$tmp/c/etc/apt/sources.list.d/debian.sources"
echo "deb http://mirror-c.example/debian bookworm main" >"$tmp/c/etc/apt/sources.list.d/extra.list"
check "fallback to sources.list.d/*.list" "$("$here/apt-mirror.sh" "$tmp/c")" "http://mirror-c.example/debian"

# nothing configured: exit 1, nothing on stdout
mkdir -p "$tmp/d/etc/apt"
out=$("$here/apt-mirror.sh" "$tmp/d" 2>/dev/null)
check "no mirror: exit 1" "$?:$out" "1:"

# podman.sh passes the detected mirror to debootstrap, no literal URL
check "podman.sh debootstrap uses apt-mirror.sh" \
    "$(grep -c '^[^#]*apt-mirror\.sh' "$here/podman.sh")" "1"
check "podman.sh has no hard-coded URL but loopback" \
    "$(grep -E '^[^#]*https?://' "$here/podman.sh" | grep -vc 'http://127\.0\.0\.1')" "0"

echo "RESULT apt-mirror: $passed passed, $failed failed"
[ "$failed" = 0 ]
