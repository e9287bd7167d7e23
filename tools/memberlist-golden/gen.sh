#!/bin/sh
# Regenerates test/fixtures/memberlist/golden.json from Debian's Go memberlist.
# Offline: GOPATH mode over /usr/share/gocode (golang-github-hashicorp-memberlist-dev).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PKG=$TMP/src/github.com/hashicorp/memberlist
mkdir -p "$(dirname "$PKG")"
cp -r /usr/share/gocode/src/github.com/hashicorp/memberlist "$PKG"
rm -f "$PKG"/*_test.go
cp "$HERE"/golden_test.go "$HERE"/bytesbuf_test.go "$PKG"/
cd "$PKG"
GOLDEN_OUT="$ROOT/test/fixtures/memberlist/golden.json" GO111MODULE=off GOPATH="$TMP:/usr/share/gocode" \
  GOCACHE="${GOCACHE:-$TMP/cache}" go test -count=1 -run TestGolden .
echo "wrote $ROOT/test/fixtures/memberlist/golden.json"
