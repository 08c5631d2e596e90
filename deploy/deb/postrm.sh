#!/bin/sh
# The state directory (/var/lib/anvil: the database, firmware, ISOs) is
# kept even on purge: it is the operator's data.
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
