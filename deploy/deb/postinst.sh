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
    # An upgrade restarts a running service on the new binary.
    if [ -n "$2" ]; then
      systemctl try-restart anvil.service || true
    fi
  fi
fi
