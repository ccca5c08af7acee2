#!/usr/bin/env bash
# Breaking-change check of wire/gridmgr.proto against the last release,
# wire/compat/released.proto, with buf (github.com/bufbuild/buf v1.75.0).
#
# Rules: buf's WIRE_JSON category (what breaks the binary wire format or
# the JSON form that `gridmgr … --json` prints, keyed by field name:
# changed field numbers, names, JSON names, cardinality or oneof
# membership; deleted fields, enum values or reserved ranges unless their
# numbers and names are reserved; a changed package) plus FIELD_SAME_TYPE
# (no type change at all, even one the wire would tolerate). New fields,
# messages, enum values and oneof members pass.
#
# Then a self-test: mutated copies of gridmgr.proto (a renamed field, a
# changed type, a reserved number reused, a oneof member deleted, an enum
# value renumbered) must each be refused for the expected rule, so that a
# check which silently passes everything cannot go unnoticed.
#
# Usage: wire/compat/check.sh [BUF]   (default: buf on PATH)
# Install: go install github.com/bufbuild/buf/cmd/buf@v1.75.0
set -euo pipefail
cd "$(dirname "$0")/../.."
buf=${1:-buf}
config='{"version":"v2","breaking":{"use":["WIRE_JSON","FIELD_SAME_TYPE"]}}'
baseline=wire/compat/released.proto

breaking() { # breaking FILE: buf's findings as JSON lines; status 100 if any
  "$buf" breaking "$1" --against "$baseline" --config "$config" --error-format json
}

echo "wire/gridmgr.proto against $baseline:"
if ! breaking wire/gridmgr.proto; then
  echo "wire/gridmgr.proto breaks compatibility with the last release (above)."
  echo "Field numbers and names are never reused, enums and the body oneof are"
  echo "append-only: add a new field instead, and reserve what you remove."
  exit 1
fi
echo "compatible"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/wire"
selftest() { # selftest NAME RULE SED-SCRIPT: the mutation must fail with RULE
  local name=$1 rule=$2 script=$3 f="$tmp/wire/gridmgr.proto" out
  sed -e "$script" wire/gridmgr.proto >"$f"
  if cmp -s wire/gridmgr.proto "$f"; then
    echo "self-test '$name': the mutation did not apply to wire/gridmgr.proto; update check.sh"; exit 1
  fi
  if out=$(breaking "$f"); then
    echo "self-test '$name': buf accepted a breaking change"; exit 1
  fi
  if ! grep -q "\"type\":\"$rule\"" <<<"$out"; then
    echo "self-test '$name': buf did not report $rule:"; echo "$out"; exit 1
  fi
  echo "self-test '$name': refused ($rule)"
}
selftest "renamed field" FIELD_SAME_NAME 's/string requirement = 2; /string requirements = 2; /'
selftest "changed type" FIELD_SAME_TYPE 's/uint32 limit = 10; /uint64 limit = 10; /'
selftest "reused reserved number" RESERVED_MESSAGE_NO_DELETE 's/reserved 13; /string zone = 13; /'
selftest "deleted oneof member" FIELD_NO_DELETE_UNLESS_NUMBER_RESERVED '/InviteReply invite_reply = 53;/d'
selftest "renumbered enum value" ENUM_VALUE_NO_DELETE_UNLESS_NUMBER_RESERVED 's/CODE_CONFLICT = 10; /CODE_CONFLICT = 11; /'
