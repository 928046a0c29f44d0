#!/bin/sh
# toolgate-launch.sh — launchd wrapper for the toolgate sidecar on macOS
# (deploy/launchd/dev.toolgate.sidecar.plist): reads the control-plane token from the keychain
# into TOOLGATE_CONTROL_PLANE_TOKEN, so it never sits in the plist or on a command line, then
# execs `toolgate` with the plist's arguments (toolgate becomes the launchd job's process, so
# `launchctl kill SIGTERM|SIGHUP` reaches it directly).
#
# Store the token once (an organization-level API key of the tenant, read + write; -w last makes
# `security` prompt for it, so it stays out of the shell history):
#
#   security add-generic-password -U -a "$USER" -s toolgate -T /usr/bin/security -w
#
# For a LaunchDaemon (no login keychain; running as root) keep the token in the System keychain
# and set TOOLGATE_KEYCHAIN=/Library/Keychains/System.keychain in the plist's environment.

set -eu

TOOLGATE_BIN=${TOOLGATE_BIN:-/usr/local/bin/toolgate}
service=${TOOLGATE_KEYCHAIN_SERVICE:-toolgate}

if [ -z "${TOOLGATE_CONTROL_PLANE_TOKEN:-}" ]; then
    # shellcheck disable=SC2086 # TOOLGATE_KEYCHAIN is empty (default keychain search list) or one path
    if ! TOOLGATE_CONTROL_PLANE_TOKEN=$(/usr/bin/security find-generic-password -s "$service" -w ${TOOLGATE_KEYCHAIN:-}); then
        echo "toolgate-launch: no keychain item for service '$service' (see the header of this script); not starting" >&2
        # Exit 0: the plist restarts only unsuccessful exits, and a missing token needs a person,
        # not a respawn every ten seconds.
        exit 0
    fi
    export TOOLGATE_CONTROL_PLANE_TOKEN
fi

exec "$TOOLGATE_BIN" "$@"
