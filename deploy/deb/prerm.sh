#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  systemctl stop anvil.service || true
  systemctl disable anvil.service || true
fi
