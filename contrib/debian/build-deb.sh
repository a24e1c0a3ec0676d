#!/usr/bin/env bash
# Builds the Debian package with cargo-deb (`cargo install cargo-deb`): the binary, then its man
# pages (one per command, gzipped) and shell completions written by that binary, then `cargo
# deb --no-build --strip`. CI checks the result with `lintian --fail-on error`.
# PROFILE (release) picks the Cargo profile; extra arguments go to cargo deb (e.g. -o DIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
profile="${PROFILE:-release}"
cargo build --locked --profile "$profile" -p sealink-cli
target="${CARGO_TARGET_DIR:-$root/target}"
dir="$target/$([ "$profile" = dev ] && echo debug || echo "$profile")"
# Pages of commands since removed must not ship: start from an empty directory.
rm -rf "$dir/assets/man"
mkdir -p "$dir/assets/man"
"$dir/sealink" man --dir "$dir/assets/man" >/dev/null
# Debian ships man pages compressed (lintian: uncompressed-manual-page); -n: no name or time
# in the header, so the same pages give the same bytes.
gzip -9nf "$dir"/assets/man/*.1
"$dir/sealink" completions bash >"$dir/assets/sealink.bash"
"$dir/sealink" completions zsh >"$dir/assets/_sealink"
"$dir/sealink" completions fish >"$dir/assets/sealink.fish"
# --strip: the release profile keeps line tables for backtraces; the package does not.
cargo deb -p sealink-cli --profile "$profile" --no-build --strip "$@"
