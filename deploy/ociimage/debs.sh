#!/bin/sh
# debs.sh ARCH DIR [PACKAGE...]: download PACKAGE (default: ipmitool) and
# every package it needs at run time for the Debian architecture ARCH
# into DIR, from this machine's apt sources, for deploy/ociimage -debs.
#
# The image has no base: what ipmitool links (libc6, libfreeipmi17,
# libreadline8, libssl3 and theirs) comes in as Debian's own packages,
# unpacked, at the versions the sources carry. apt runs on a state
# directory of its own per architecture (ANVIL_APT_STATE, default
# ~/.cache/anvil-apt), so this needs neither root nor
# `dpkg --add-architecture`, and leaves the machine's apt and dpkg as
# they were; its lists are kept there between runs.
#
# Dependencies are followed through Depends and Pre-Depends, taking the
# first of alternatives. SKIP names packages that only serve package
# management or maintainer scripts (ipmitool's Pre-Depends on
# init-system-helpers, for its ipmievd unit; readline-common's dpkg |
# install-info), which a container that never runs dpkg does not need: ipmitool and its libraries run without them, as TestImage checks
# by resolving every ELF file's libraries in the image.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 ARCH DIR [PACKAGE...]" >&2; exit 2; }
arch=$1 dir=$2
shift 2
[ $# -gt 0 ] || set -- ipmitool
SKIP=" debconf debconf-2.0 dpkg init-system-helpers install-info perl-base "

state=${ANVIL_APT_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/anvil-apt}/$arch
mkdir -p "$state/lists/partial" "$state/archives/partial" "$dir"
# apt's own locks are off (they want root); one run at a time per state
# instead, as several checkouts on one machine may package at once.
exec 9>"$state/lock"
flock 9
: >"$state/status"
opts="-q -o Debug::NoLocking=1 -o APT::Sandbox::User=root
 -o Dir::State=$state -o Dir::State::Lists=$state/lists -o Dir::State::status=$state/status
 -o Dir::Cache=$state -o Dir::Cache::archives=$state/archives -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
 -o APT::Architecture=$arch -o APT::Architectures=$arch
 -o APT::Get::AllowUnauthenticated=false"
# shellcheck disable=SC2086
apt-get $opts update >&2

todo="$*" done=""
while [ -n "$todo" ]; do
  set -- $todo
  p=$1
  shift
  todo="$*"
  case " $done $SKIP " in *" $p "*) continue ;; esac
  done="$done $p"
  # "  Depends: x" is a dependency; " |Depends: x" the first of
  # alternatives, whose next line is the second (not taken); "<x>" a
  # virtual package.
  # shellcheck disable=SC2086
  deps=$(apt-cache $opts depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$p" |
    awk 'alt { alt = 0; next } /^ \|(Pre)?Depends:/ { print $2; alt = 1; next } /^  (Pre)?Depends:/ { print $2 }' |
    sed 's/:any$//' | grep -v '^<' || true)
  todo="$todo $deps"
done
cd "$dir"
# shellcheck disable=SC2086
apt-get $opts download $done >&2
ls "$dir"/*.deb
