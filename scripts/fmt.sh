#!/usr/bin/env bash
# Formats the workspace (`scripts/fmt.sh`) or checks it (`scripts/fmt.sh --check`):
# `cargo fmt --all`, plus the placement policies' files, whose modules are declared by
# their registry lines (a macro, crates/engine/src/policy/mod.rs), where rustfmt does
# not look.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo fmt --all -- "$@" crates/engine/src/policy/*.rs crates/engine/src/policy/*/mod.rs
