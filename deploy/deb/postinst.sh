#!/bin/sh
# Create the service user and tell systemd about the unit. The service is
# not started: review /etc/anvil/anvil.yaml first, then
# `systemctl enable --now anvil`.
set -e
if [ "$1" = configure ] || [ "$1" = abort-upgrade ]; then
  if command -v systemd-sysusers >/dev/null 2>&1; then
    systemd-sysusers anvil.conf
  elif ! getent passwd anvil >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/anvil --no-create-home --shell /usr/sbin/nologin anvil
  fi
  # The config may hold a PostgreSQL password and the session secret:
  # readable by the service, not by every local user.
  chgrp anvil /etc/anvil/anvil.yaml
  chmod 0640 /etc/anvil/anvil.yaml
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    # An upgrade restarts a running service on the new binary, which
    # migrates the schema at start: first a backup (SQLite; `anvil db
    # backup` is safe while the old one serves), kept and named here so
    # a rollback has the database the old binary knew.
    if [ -n "$2" ] && systemctl is-active --quiet anvil.service; then
      backup=/var/lib/anvil/backups/anvil-before-upgrade-from-$2-$(date -u +%Y%m%dT%H%M%SZ).db
      install -d -o anvil -g anvil -m 0700 /var/lib/anvil/backups
      if out=$(runuser -u anvil -- /usr/bin/anvil db backup "$backup" 2>&1); then
        echo "anvil: backed up the database before the upgrade to $backup"
      else
        echo "anvil: no backup taken before the upgrade ($out); back PostgreSQL up with pg_dump" >&2
      fi
    fi
    if [ -n "$2" ]; then
      systemctl try-restart anvil.service || true
    fi
  fi
fi
