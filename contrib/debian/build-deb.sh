#!/usr/bin/env bash
# Builds the Debian package with cargo-deb (`cargo install cargo-deb`): the binary, then its man
# pages (one per command) and shell completions written by that binary, then `cargo deb
# --no-build`.
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
"$dir/sealink" completions bash >"$dir/assets/sealink.bash"
"$dir/sealink" completions zsh >"$dir/assets/_sealink"
"$dir/sealink" completions fish >"$dir/assets/sealink.fish"
cargo deb -p sealink-cli --profile "$profile" --no-build "$@"
