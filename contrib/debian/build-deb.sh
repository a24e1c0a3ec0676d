#!/usr/bin/env bash
# Builds the Debian package with cargo-deb (`cargo install cargo-deb`): the binary, then its man
# page and shell completions written by that binary, then `cargo deb --no-build`.
# PROFILE (release) picks the Cargo profile; extra arguments go to cargo deb (e.g. -o DIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
profile="${PROFILE:-release}"
cargo build --locked --profile "$profile" -p sealink-cli
target="${CARGO_TARGET_DIR:-$root/target}"
dir="$target/$([ "$profile" = dev ] && echo debug || echo "$profile")"
mkdir -p "$dir/assets"
"$dir/sealink" man >"$dir/assets/sealink.1"
"$dir/sealink" completions bash >"$dir/assets/sealink.bash"
"$dir/sealink" completions zsh >"$dir/assets/_sealink"
"$dir/sealink" completions fish >"$dir/assets/sealink.fish"
cargo deb -p sealink-cli --profile "$profile" --no-build "$@"
