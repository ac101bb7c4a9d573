#!/usr/bin/env bash
# tests/deploy/apt-mirror.sh: prints the Debian mirror this machine's apt
# already uses, for debootstrap (tests/deploy/podman.sh), so the container
# test runs wherever apt does instead of depending on one hard-coded host.
#
#   mirror=$(tests/deploy/apt-mirror.sh) || skip   # exit 1: no mirror found
#   tests/deploy/apt-mirror.sh /some/root          # reads /some/root/etc/apt/...
#
# Order: the first URIs: of the deb822 file etc/apt/sources.list.d/debian.sources
# (Debian 12's default), else the first `deb` line of etc/apt/sources.list
# (options such as [signed-by=...] skipped), else of sources.list.d/*.list.
set -uo pipefail
root=${1:-}
d822="$root/etc/apt/sources.list.d/debian.sources"
if [ -r "$d822" ]; then
    m=$(awk '/^URIs:/{print $2; exit}' "$d822")
    if [ -n "$m" ]; then
        echo "$m"
        exit 0
    fi
fi
for f in "$root/etc/apt/sources.list" "$root"/etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    # deb [opt=val ...] URI suite components: the URI is the first field with "://"
    m=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; exit } }' "$f")
    if [ -n "$m" ]; then
        echo "$m"
        exit 0
    fi
done
echo "apt-mirror: no Debian mirror in $root/etc/apt (debian.sources or sources.list)" >&2
exit 1
