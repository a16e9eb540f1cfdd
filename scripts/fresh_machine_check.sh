#!/usr/bin/env bash
# Proves the README's commands on a machine with nothing installed by hand: builds a minimal
# Debian 12 root with debootstrap, copies the committed tree (and ../shared) into it, and runs
# scripts/setup.sh and the main job (scripts/demo.sh) there with chroot. Fails if either fails.
# Downloaded .deb files are kept in a cache outside the root, and compiled objects in ccache's,
# so a repeated check costs unpacking and linking, not the network or the compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
cache="${EDGETRAIN_FRESH_CACHE:-$HOME/.cache/edgetrain-fresh}"
mirror="${EDGETRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
root=$(mktemp -d /var/tmp/edgetrain-fresh.XXXXXX)
mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
trap "exit 1" TERM INT
bind() { mkdir -p "$2"; mount --bind "$1" "$2"; mounts+=("$2"); }

[ "$(id -u)" -eq 0 ] || { echo "fresh_machine_check: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}
ccache_dir="${CCACHE_DIR:-$HOME/.cache/ccache}"  # the host's: the root compiles with the same g++
mkdir -p "$cache/debs" "$ccache_dir" "$cache/npm" "$cache/pip"
start=$SECONDS
echo "fresh: debootstrap bookworm (minbase) into $root"
debootstrap --variant=minbase --cache-dir="$cache/debs" bookworm "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
  tail -20 "$cache/debootstrap.log" >&2
  exit 1
}
# A Debian 12 install follows its updates and security suites too.
security="${EDGETRAIN_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' "$mirror" "$mirror" \
  "$security" >"$root/etc/apt/sources.list"
echo "fresh: root ready after $((SECONDS - start)) s: $(chroot "$root" dpkg-query -W -f='.\n' | wc -l) packages"

# What a fresh machine has besides Debian's minimal system: nothing but the sources (a clean
# clone: the committed files only) and the shared reference material beside them.
mkdir -p "$root/work/main"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$root/work/main"
[ -d ../shared ] && cp -a ../shared "$root/work/shared"
# The network is the machine's, not a package's: its resolver, and the CA of an intercepting
# proxy where there is one (update-ca-certificates keeps local CAs when the root installs its own).
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
network_env=()
for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY SSL_CERT_FILE NODE_EXTRA_CA_CERTS PIP_CERT \
  REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO PIP_DEFAULT_TIMEOUT; do
  if [ -n "${!var:-}" ]; then network_env+=("$var=${!var}"); fi
done
bind /dev "$root/dev"
bind /dev/pts "$root/dev/pts"
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
mount -t sysfs sys "$root/sys" && mounts+=("$root/sys")
bind "$cache/debs" "$root/var/cache/apt/archives"
bind "$ccache_dir" "$root/root/.cache/ccache"
bind "$cache/npm" "$root/root/.npm"
bind "$cache/pip" "$root/root/.cache/pip"

run_in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 "${network_env[@]}" CCACHE_DIR=/root/.cache/ccache CCACHE_BASEDIR=/work /bin/bash -c "cd /work/main && $1"
}
echo "fresh: scripts/setup.sh"
run_in_root "scripts/setup.sh" >"$cache/setup.log" 2>&1 || {
  tail -40 "$cache/setup.log" >&2
  echo "fresh: FAILED: scripts/setup.sh on a fresh Debian 12 root (log: $cache/setup.log)" >&2
  exit 1
}
echo "fresh: setup done after $((SECONDS - start)) s"
echo "fresh: scripts/demo.sh"
run_in_root "scripts/demo.sh" >"$cache/demo.log" 2>&1 || {
  tail -40 "$cache/demo.log" >&2
  echo "fresh: FAILED: scripts/demo.sh on a fresh Debian 12 root (log: $cache/demo.log)" >&2
  exit 1
}
tail -3 "$cache/demo.log"
grep -q '^accuracy ' "$cache/demo.log" || { echo "fresh: FAILED: the demo printed no accuracy" >&2; exit 1; }
echo "fresh: the README's commands passed on a fresh Debian 12 root in $((SECONDS - start)) s"
