#!/bin/sh
# Starts a throwaway Anvil for the journeys: a fresh SQLite file, demo
# nodes, the accounts the tests sign in as, a loopback OpenID provider
# (internal/testop) for the SSO journey and a Redfish simulator for the
# hardware journey. ANVIL_PORT is Anvil's port; ANVIL_SIM_PORT and
# ANVIL_OP_PORT, the simulator's and the provider's, start them (without
# them the instance has neither: the 500-node journey's); ANVIL_DEMO is
# the number of demo nodes. ANVIL_IPMI_PORT starts an IPMI BMC with
# serial-over-LAN (ipmi_sim on that UDP port) whose machine echoes what it
# is sent (socat and cat on that TCP port), and ANVIL_CONSOLE_PORT is the
# port Anvil's console listener takes, for the console journey.
# playwright.config.mjs chooses free ports.
set -eu
port=${ANVIL_PORT:-18085}
demo=${ANVIL_DEMO:-40}
sim_port=${ANVIL_SIM_PORT:-}
op_port=${ANVIL_OP_PORT:-}
ipmi_port=${ANVIL_IPMI_PORT:-}
console_port=${ANVIL_CONSOLE_PORT:-}
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
go build -o "$dir/anvil" .
go build -o "$dir/testop" ./internal/testop
db="$dir/anvil.db"
a="$dir/anvil"
$a migrate --database "$db" >/dev/null
echo 'tenant-password-1' | $a user create tina --password-stdin --database "$db"
$a user grant tina --project tenant-blue --role member --database "$db"
$a user grant tina --project tenant-green --role reader --database "$db"
echo 'manager-password-1' | $a user create mark --password-stdin --database "$db"
$a user grant mark --project tenant-blue --role manager --database "$db"
echo 'operator-password-1' | $a user create olga --password-stdin --database "$db"
$a user grant olga --system --role admin --database "$db"
# A system manager, whom Ironic's default policy does not let enrol:
# the enrol journey shows them why.
echo 'sysmanager-password-1' | $a user create sam --password-stdin --database "$db"
$a user grant sam --system --role manager --database "$db"
# A system reader, who may read the audit log and change nothing.
echo 'reader-password-1' | $a user create rita --password-stdin --database "$db"
$a user grant rita --system --role reader --database "$db"
# The audit journey dates an event back to last week in this file: the
# API writes every event at the time it happens.
echo "$db" >"${TMPDIR:-/tmp}/anvil-e2e-$port.db-path"
# An owner project's manager and member (demo nodes hw-east owns), for
# the journey that publishes a runbook and adds its trait to nodes.
echo 'owner-password-1' | $a user create owen --password-stdin --database "$db"
$a user grant owen --project hw-east --role manager --database "$db"
echo 'member-password-1' | $a user create mel --password-stdin --database "$db"
$a user grant mel --project hw-east --role member --database "$db"

# Playwright ends this script with SIGKILL, so no trap would run: a
# detached watchdog removes the scratch directory (and stops the
# simulators, if this instance started them) once this script is gone.
# The reference copies (internal/reference): ANVIL_REFERENCE_DIR, else
# ../shared/reference beside the checkout.
ref_dir=${ANVIL_REFERENCE_DIR:-$(pwd)/../shared/reference}
sim=$ref_dir/redfish-sim/start.sh
setsid sh -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; [ -d "$3/bmc" ] && "$2" stop "$3/bmc"
  [ -f "$3/pids" ] && kill $(cat "$3/pids"); rm -rf "$3" "$4"' watchdog $$ "$sim" "$dir" "${TMPDIR:-/tmp}/anvil-e2e-$port.db-path" \
  >/dev/null 2>&1 </dev/null &

sso=""
if [ -n "$sim_port" ] && [ -n "$op_port" ]; then
  # A Redfish BMC (redfish-sim, as the Go tests run it) whose BIOS really
  # takes staged settings at reset, for the hardware journey, which enrols
  # a node on it.
  SIM_POWER_DELAY='0.2 0.5' "$sim" start "$dir/bmc" "$sim_port" >/dev/null
  "$dir/testop" -listen "127.0.0.1:$op_port" -redirect "http://127.0.0.1:$port/auth/oidc/callback" \
    -groups anvil:project:tenant-blue:member &
  op=$!
  trap 'kill $op 2>/dev/null' EXIT INT TERM
  for _ in $(seq 1 50); do
    curl -sf "http://127.0.0.1:$op_port/.well-known/openid-configuration" >/dev/null && break
    sleep 0.1
  done
  sso="--oidc-issuer http://127.0.0.1:$op_port --oidc-client-id anvil --oidc-client-secret anvil-secret
    --oidc-redirect-url http://127.0.0.1:$port/auth/oidc/callback"
fi

console=""
if [ -n "$ipmi_port" ] && [ -n "$console_port" ]; then
  # The machine: its serial port echoes every byte, as a shell at a
  # prompt would. ipmi_sim's SOL connects to it.
  setsid socat "TCP-LISTEN:$ipmi_port,bind=127.0.0.1,reuseaddr,fork" EXEC:cat >/dev/null 2>&1 </dev/null &
  echo $! >>"$dir/pids"
  ref=$ref_dir/ipmi-sim
  mkdir -p "$dir/ipmi/state" "$dir/ipmi/persist"
  echo 0 >"$dir/ipmi/state/power"
  sed -e "s#^\( *addr 127.0.0.1\) 9001#\1 $ipmi_port#" -e "s#CHASSIS_CONTROL#$ref/chassis-control.sh#" \
    "$ref/lan.conf" >"$dir/ipmi/lan.conf"
  echo "  sol \"tcp:127.0.0.1:$ipmi_port\" 115200" >>"$dir/ipmi/lan.conf"
  IPMI_SIM_STATE="$dir/ipmi/state" setsid ipmi_sim -n -c "$dir/ipmi/lan.conf" -f "$ref/sim.emu" -s "$dir/ipmi/persist" \
    >"$dir/ipmi/log" 2>&1 </dev/null &
  echo $! >>"$dir/pids"
  console="--console-port-range $console_port:$console_port"
fi

# $sso and $console are split into their flags on purpose.
# shellcheck disable=SC2086
$a serve --database "$db" --listen "127.0.0.1:$port" --demo "$demo" \
  --policy-override-enabled --policy-dir "$dir/policy.d" $sso $console \
  --session-secret playwright-only-secret --log-level warn
