#!/usr/bin/env bash
# Starts nats-server with a lineage config after checking the password variables it uses.
#
#   config/nats/run-nats-server.sh [CONFIG] [nats-server flags...]
#
# CONFIG defaults to config/nats-server.conf. Every `$LINEAGE_NATS_*_PASSWORD` the file names
# must be set, non-empty and a safe config token (a letter, then 15 or more letters, digits,
# '-' or '_'): nats-server lets a user with an *empty* password variable in with no password,
# and reads each value as config text (`12345` is a number, `a b` is a syntax error). Generate
# one with:  echo "p$(openssl rand -hex 24)"
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
config=${1:-"$here/../nats-server.conf"}
[ $# -gt 0 ] && shift
if [ ! -f "$config" ]; then
  echo "run-nats-server: config file $config does not exist" >&2
  exit 2
fi

# Variables referenced as values (`password: $NAME`), comments skipped.
names=$(sed -e 's/#.*//' "$config" | grep -oE '\$LINEAGE_NATS_[A-Z0-9_]+' | tr -d '$' | sort -u || true)
if [ -z "$names" ]; then
  echo "run-nats-server: $config references no \$LINEAGE_NATS_* password variable; refusing to start an open server" >&2
  exit 2
fi
bad=0
for name in $names; do
  value=${!name-}
  if [ -z "$value" ]; then
    echo "run-nats-server: $name is unset or empty; set it (e.g. export $name=\"p\$(openssl rand -hex 24)\")" >&2
    bad=1
  elif ! [[ $value =~ ^[A-Za-z][A-Za-z0-9_-]{15,}$ ]]; then
    echo "run-nats-server: $name must be a letter then at least 15 letters, digits, '-' or '_' (nats-server parses it as config)" >&2
    bad=1
  fi
done
[ $bad -eq 0 ] || exit 2

nats_server=${NATS_SERVER_BIN:-nats-server}
exec "$nats_server" -c "$config" "$@"
