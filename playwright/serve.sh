#!/bin/sh
# Starts a throwaway Anvil for the journeys: a fresh SQLite file, demo
# nodes, and the accounts the tests sign in as.
set -eu
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
go build -o "$dir/anvil" .
db="$dir/anvil.db"
a="$dir/anvil"
$a migrate --database "$db" >/dev/null
echo 'tenant-password-1' | $a user create tina --password-stdin --database "$db"
$a user grant tina --project tenant-blue --role member --database "$db"
$a user grant tina --project tenant-green --role reader --database "$db"
echo 'operator-password-1' | $a user create olga --password-stdin --database "$db"
$a user grant olga --system --role admin --database "$db"
exec $a serve --database "$db" --listen 127.0.0.1:18085 --demo 40 --policy-override-enabled --policy-dir "$dir/policy.d" --session-secret playwright-only-secret --log-level warn
