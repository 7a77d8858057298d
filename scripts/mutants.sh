#!/usr/bin/env bash
# Mutation testing of the Rust files a change touched, with cargo-mutants: every mutant
# that no test notices ("missed") is a place where a bug could hide from the suite.
#
#   scripts/mutants.sh [options] [BASE_REF] [-- CARGO_MUTANTS_ARGS...]
#
#   BASE_REF        mutate the files changed since BASE_REF (default: main): the diff from
#                   the merge base of BASE_REF and HEAD to the working tree, so committed
#                   and uncommitted edits count and changes that landed on BASE_REF since
#                   the branch forked do not; new files not yet added to git count too.
#                   Only crates/*/src/**/*.rs files are taken (tests/ and benches are not
#                   mutated).
#   --file PATH     mutate PATH instead of the diff (repeatable; relative to the current
#                   directory or to the repository root), e.g.
#                   --file crates/protocol/src/text.rs
#   --jobs N        mutants built and tested side by side (default 2, for the 2-core
#                   machine; the total number of rustc/test processes is still capped at
#                   the number of CPUs by cargo-mutants' jobserver)
#   --timeout S     fixed test timeout per mutant in seconds. Default: cargo-mutants' own,
#                   5x the unmutated test time, but never under 30 s, so a mutant that
#                   makes a loop endless is ended and counted as "timeout"
#   --build-timeout S  build timeout per mutant in seconds (default 600)
#   --output DIR    where mutants.out/ is written (default: the repository root; the
#                   previous run is kept as mutants.out.old; both are ignored by git)
#   --list          only list the mutants that would be tested
#   --summary-only  print the per-file table of an existing DIR/mutants.out and stop
#   -- ARGS         passed to cargo mutants as is (e.g. -- --re 'parse_' or --shard 1/4)
#
# Each mutant is tested only with the tests of the package that owns its file (cargo-mutants
# is given that package with --package, and by default tests only the mutated package), via
# cargo nextest when it is installed (nextest stops at the first failing test; it does not
# run doctests), else cargo test.
#
# At the end it prints caught / missed / timeout / unviable per file, read from
# mutants.out/outcomes.json; the surviving mutants are listed in mutants.out/missed.txt
# (file:line:column and the mutation) and each one's test log is in mutants.out/log/.
# Each file takes a while: one protocol parser (~175-200 mutants) took 11-15 minutes on the
# shared 2-core machine. Run big files alone, or split them with -- --shard k/n.
#
# Exit status: cargo-mutants' own (0 all caught, 2 some missed, 3 some timed out, 4 the
# tests fail without any mutation, 1 usage), or 1 when there is nothing to mutate.
#
# Examples:
#   scripts/mutants.sh                                   # files changed since main
#   scripts/mutants.sh origin/main                       # ... since origin/main
#   scripts/mutants.sh --file crates/protocol/src/meta.rs
#   scripts/mutants.sh --file crates/engine/src/lru.rs --timeout 120 -- --re 'touch'
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Paths given on the command line are relative to where the script was started.
caller_dir="$PWD"
cd "$repo_root" || exit 1

die() { printf 'mutants.sh: %s\n' "$*" >&2; exit 1; }

# An absolute path for a path given relative to the caller's directory.
absolute() {
    case "$1" in
        /*) printf '%s\n' "$1" ;;
        *) printf '%s\n' "$caller_dir/$1" ;;
    esac
}

# A --file path relative to the repository root: given relative to the caller's directory
# when it exists there, else taken as relative to the root already.
from_caller() {
    local path
    path="$(absolute "$1")"
    if [ -e "$path" ]; then
        realpath --relative-to="$repo_root" "$path"
    else
        printf '%s\n' "$1"
    fi
}

base_ref="main"
files=()
jobs="${MUTANTS_JOBS:-2}"
test_timeout_s=""
build_timeout_s=600
output_dir="$repo_root"
list_only=0
summary_only=0
extra_args=()

while [ "$#" -gt 0 ]; do
    case "$1" in
        --file) [ "$#" -ge 2 ] || die "--file needs a path"; files+=("$(from_caller "$2")"); shift 2 ;;
        --file=*) files+=("$(from_caller "${1#--file=}")"); shift ;;
        --jobs) [ "$#" -ge 2 ] || die "--jobs needs a number"; jobs="$2"; shift 2 ;;
        --timeout) [ "$#" -ge 2 ] || die "--timeout needs seconds"; test_timeout_s="$2"; shift 2 ;;
        --build-timeout) [ "$#" -ge 2 ] || die "--build-timeout needs seconds"; build_timeout_s="$2"; shift 2 ;;
        --output) [ "$#" -ge 2 ] || die "--output needs a directory"; output_dir="$(absolute "$2")"; shift 2 ;;
        --list) list_only=1; shift ;;
        --summary-only) summary_only=1; shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        --) shift; extra_args=("$@"); break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) base_ref="$1"; shift ;;
    esac
done

for number in "$jobs" "$build_timeout_s" ${test_timeout_s:+"$test_timeout_s"}; do
    case "$number" in ''|*[!0-9]*|0) die "expected a positive whole number, got '$number'" ;; esac
done

# Prints the per-file table of outcomes.json: one row per mutated file, then the total.
print_summary() {
    local outcomes="$1"
    [ -f "$outcomes" ] || { printf 'mutants.sh: no %s to summarize\n' "$outcomes" >&2; return 1; }
    python3 - "$outcomes" <<'PY'
import collections, json, sys

with open(sys.argv[1]) as f:
    run = json.load(f)
# cargo-mutants' summary names -> the columns of the table.
column_of = {"CaughtMutant": "caught", "MissedMutant": "missed",
             "Timeout": "timeout", "Unviable": "unviable"}
columns = ["caught", "missed", "timeout", "unviable"]
per_file = collections.defaultdict(collections.Counter)
for outcome in run["outcomes"]:
    scenario = outcome["scenario"]
    if not isinstance(scenario, dict) or "Mutant" not in scenario:
        continue  # the baseline (unmutated) run
    mutant = scenario["Mutant"]
    path = mutant.get("file") or mutant["source_file"]["path"]
    per_file[path][column_of.get(outcome["summary"], outcome["summary"])] += 1

width = max([len(p) for p in per_file] + [len("total")])
header = f"{'file':<{width}}" + "".join(f" {c:>9}" for c in columns)
print(header)
print("-" * len(header))
total = collections.Counter()
for path in sorted(per_file):
    counts = per_file[path]
    total.update(counts)
    print(f"{path:<{width}}" + "".join(f" {counts[c]:>9}" for c in columns))
print("-" * len(header))
print(f"{'total':<{width}}" + "".join(f" {total[c]:>9}" for c in columns))
others = {k: v for k, v in total.items() if k not in columns}
if others:
    print(f"other outcomes: {dict(others)}")
PY
}

outcomes_json="$output_dir/mutants.out/outcomes.json"
if [ "$summary_only" -eq 1 ]; then
    print_summary "$outcomes_json"
    exit $?
fi

command -v cargo-mutants >/dev/null 2>&1 || cargo mutants --version >/dev/null 2>&1 ||
    die "cargo-mutants is not installed: cargo install --locked cargo-mutants"

if [ "${#files[@]}" -eq 0 ]; then
    git rev-parse --verify --quiet "$base_ref^{commit}" >/dev/null ||
        die "base ref '$base_ref' is not a commit here (give another, or use --file)"
    merge_base="$(git merge-base "$base_ref" HEAD)" || die "no merge base of $base_ref and HEAD"
    # --diff-filter=d: a deleted file has nothing left to mutate. New files not yet added
    # to git count as changed too.
    while IFS= read -r path; do
        files+=("$path")
    done < <({
        git diff --name-only --diff-filter=d "$merge_base" -- 'crates/*/src/*.rs'
        git ls-files --others --exclude-standard -- 'crates/*/src/*.rs'
    } | sort -u)
    [ "${#files[@]}" -gt 0 ] ||
        die "no crates/*/src/**/*.rs file changed since $base_ref ($merge_base); use --file to pick one"
    printf 'mutants.sh: files changed since %s (merge base %s):\n' "$base_ref" "${merge_base:0:12}"
else
    printf 'mutants.sh: files given:\n'
fi

# Each file's package: the name in the Cargo.toml of the crate directory that holds it.
packages=()
file_args=()
for path in "${files[@]}"; do
    path="${path#./}"
    [ -f "$path" ] || die "no such file: $path"
    case "$path" in
        crates/*/src/*.rs) ;;
        *) die "$path is not under crates/*/src/ (only crate sources are mutated)" ;;
    esac
    crate_dir="${path%%/src/*}"
    package="$(sed -n 's/^name *= *"\([^"]*\)".*/\1/p' "$crate_dir/Cargo.toml" | head -n 1)"
    [ -n "$package" ] || die "cannot read the package name from $crate_dir/Cargo.toml"
    printf '  %s (package %s)\n' "$path" "$package"
    file_args+=(--file "$path")
    case " ${packages[*]:-} " in *" $package "*) ;; *) packages+=("$package") ;; esac
done

args=(mutants --no-shuffle --jobs "$jobs" --build-timeout "$build_timeout_s" --output "$output_dir")
for package in "${packages[@]}"; do args+=(--package "$package"); done
args+=("${file_args[@]}")
if [ -n "$test_timeout_s" ]; then
    args+=(--timeout "$test_timeout_s")
else
    args+=(--minimum-test-timeout 30)
fi
if cargo nextest --version >/dev/null 2>&1; then
    args+=(--test-tool nextest)
fi
if [ "$list_only" -eq 1 ]; then
    args+=(--list)
fi
args+=(${extra_args[@]+"${extra_args[@]}"})

# A test that a mutant makes panic would otherwise symbolize a backtrace (RUST_BACKTRACE=1
# is common in shells here), which on a loaded 2-core machine took 10-20 s and pushed
# mutants that the tests did catch past the timeout.
export RUST_BACKTRACE=0

printf 'mutants.sh: cargo %s\n' "${args[*]}"
started_s="$(date +%s)"
cargo "${args[@]}"
status=$?
[ "$list_only" -eq 1 ] && exit "$status"

printf '\nmutants.sh: cargo mutants exited %d after %d s wall time\n' "$status" "$(($(date +%s) - started_s))"
printf 'mutants.sh: outcomes per file (%s):\n\n' "$outcomes_json"
print_summary "$outcomes_json"
if [ -s "$output_dir/mutants.out/missed.txt" ]; then
    printf '\nmissed (no test failed with this change; %s):\n' "$output_dir/mutants.out/missed.txt"
    sed 's/^/  /' "$output_dir/mutants.out/missed.txt"
fi
if [ -s "$output_dir/mutants.out/timeout.txt" ]; then
    printf '\ntimed out:\n'
    sed 's/^/  /' "$output_dir/mutants.out/timeout.txt"
fi
exit "$status"
