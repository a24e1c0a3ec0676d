#!/usr/bin/env bash
# Paper 004 (and 000) on a lent machine with a CUDA GPU and many cores, in 6 minutes (issue 32,
# item 5; issue 15): the GPU tests, Figure 12 with all four GPU strategies (`bench gpu`), the
# multicore figures at batch 128 for 1-32 workers (`bench tunnel-cores`), and paper 000's
# stacks at 12 and 16 workers (`bench stacks`).
#
# 1. Here, where Rust is installed, make the kit:
#      bash bench/gpu-device.sh --make-kit DIR
#    It builds `cargo build --release -p sealink-lab --features cuda` and
#    `cargo test --release -p sealink-gpu --features cuda --no-run` (the test binaries are read
#    from cargo's --message-format=json), and copies them stripped into DIR/bin: sealink-lab,
#    test-sealink_gpu (the crate's unit tests) and test-gpu (tests/gpu.rs). DIR/VERSIONS says
#    the commit, the build time, rustc, each binary's sha256 and the newest glibc symbol version
#    they need. They link nothing but glibc (and libgcc_s); cudarc opens libcuda (the driver)
#    and libnvrtc at run time, so a machine without them runs and reports the GPU absent. About
#    15 MB. Nothing else is needed there beyond bash, coreutils, tar and gzip (nvidia-smi, lscpu
#    and uptime are used if present).
#    For the device tool: make it in an ignored folder of the repository and carry that, e.g.
#      echo /.gpukit/ >>.git/info/exclude; bash bench/gpu-device.sh --make-kit .gpukit
#    then run (carry [".gpukit"]):  bash bench/gpu-device.sh .gpukit "$OUT"   (6 minutes)
# 2. There:
#      bash bench/gpu-device.sh KIT OUTDIR
#    The plan is printed first, each step with its time limit (`timeout`) and the --budget its
#    bench fits its points into; the limits add up to at most TOTAL_S (360 s) with the set-up,
#    the archive and `timeout`'s kill grace, and a step that would end past that is cut to what
#    is left (or skipped). The steps:
#      test-sealink_gpu, test-gpu    the kit's test binaries (the GPU tests skip, saying why,
#                                    without a GPU or NVRTC)
#      gpu            bench gpu --strategy naive,naive-streams,no-streams,streams at 4 KB, 64 KB,
#                     128 KB and 1 MB, CPU rows at 1, 4 and 16 workers, --runs 3
#      tunnel-cores   bench tunnel-cores --batch 128 --workers 1,2,4,8,16,24,32 --runs 3:
#                     worker counts above the machine's cores are dropped (and the core count
#                     added): there they measure oversubscription, not scaling, and the order
#                     pair and the grouping sweep, which run at the largest count, would be
#                     oversubscribed too. Set TC_WORKERS to keep them.
#      stacks-12, stacks-16   bench stacks --workers 12 and --workers 16 (each measures 1..N
#                     workers; the paper comparison is at N against the paper's 12 processors),
#                     stacks baseline,md5,des-md5,aes128-gcm, --runs 3 --seconds 0.2. The budget
#                     shortens the runs, then skips stacks from the end of the list; past the
#                     first stack it is also held to as the run goes (a stack that would not
#                     fit is not started, one that runs past it is abandoned: des-md5's windows
#                     drain slowly at 12-16 workers on few cores). Kept on a machine with fewer
#                     cores than 16 (oversubscribed: a check of the script, not a figure).
#    `uptime` (or /proc/loadavg) between the steps. Every result goes into ONE archive,
#    OUTDIR/gpu-device-<UTC time>.tar.gz, rewritten after each step (a run cut short keeps what
#    it measured): run.log (everything printed), machine.txt (nvidia-smi, NVRTC, lscpu, nproc,
#    memory, glibc, os-release), kit.txt (the kit's VERSIONS), test-*.log, one directory per
#    bench (its --out: CSV, SVG, run record; <step>.log is what it printed), status.tsv (step,
#    exit status, seconds, limit, budget) and summary.txt. Exit status 1 if a step failed
#    (124: stopped by its limit) or was skipped for time.
#    Environment: TOTAL_S (360), TC_WORKERS, GPU_WORKERS (1,4,16), GPU_SIZES, PLAN.
# 3. PLAN=lab (what bench/lab-device.sh runs; issue 49): the same kit, set-up and archive
#    (OUTDIR/lab-device-<UTC time>.tar.gz), another plan:
#      test-sealink_gpu, test-gpu    as above (limits 20 s and 25 s)
#      gpu-packet     bench gpu --packet-size: Figure 12 on the paper's own x-axis, packets of
#                     4-128 KB (128 per batch, one thread block each) through all four
#                     strategies, each strategy's first batch at each size checked against
#                     aws-lc-rs; the CPU line (aws-lc-rs) at 1, 4 and 16 threads, --runs 3
#                     --seconds 0.2 (limit 62 s, budget 48 s)
#      tunnel-cores   --batch 128 --workers 1,2,4,8,12,16 --order-each: the order cost at every
#                     worker count (limit 48 s, budget 37 s)
#      thread-times   --threads 1,2,4,8,12,16 --volume 128 MiB --tests 3 (limit 32 s; it takes
#                     no budget)
#      stacks-12-aes  bench stacks --workers 12 --stacks aes128-gcm --runs 2 --seconds 0.1
#                     (every count 1..12; limit 40 s, budget 30 s): today's AES-GCM, whose
#                     receive ceiling §31 projected at 7.4 workers
#      stacks-12-des, stacks-12-3des   the same with --stacks des-md5 (limit 40 s, budget 32 s)
#                     and --stacks 3des-md5 (limit 55 s, budget 44 s), --batch 32: paper 000's
#                     DES and 3-DES stacks; batches of 32, since a batch of 192 4 KiB packets
#                     takes 0.05-0.3 s of one worker and the windows drained past the budget;
#                     a step each, so that one running long does not cost the other its turn
#    and the kernel's TLS ULP (kTLS, paper 003's SO_CRYPT today) recorded in ulp.txt:
#    /proc/sys/net/ipv4/tcp_available_ulp, whether the tls module is loaded or on disk. Worker
#    counts above the machine's cores are dropped as above (the stacks steps keep 12:
#    oversubscribed on fewer than 12 cores, a check of the script, not a figure).
#
# Check of a kit here, in a mount namespace with a minimal PATH: bench/gpu-device-check.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Values after the "executable" key of cargo's JSON lines (one per line), of the artifacts whose
# profile is (test) or is not (bin) a test profile.
json_executables() { # $1 = test|bin, stdin = cargo's JSON
  if [ "$1" = test ]; then
    grep -E '"profile":\{[^}]*"test":true' || true
  else
    grep -Ev '"profile":\{[^}]*"test":true' || true
  fi | grep '"reason":"compiler-artifact"' | grep -o '"executable":"[^"]*"' | cut -d'"' -f4
}

make_kit() {
  local kit="$1" json b name need
  mkdir -p "$kit"
  kit="$(cd "$kit" && pwd)"
  rm -rf "$kit/bin" "$kit/VERSIONS"
  mkdir -p "$kit/bin"
  json="$(mktemp /tmp/gpu-kit-json.XXXXXX)"
  echo "make-kit: cargo build --release -p sealink-lab --features cuda" >&2
  (cd "$root" && cargo build --release -p sealink-lab --features cuda --message-format=json) >"$json"
  local lab
  lab="$(json_executables bin <"$json" | grep '/sealink-lab$' | tail -n 1)"
  [ -x "$lab" ] || { echo "make-kit: no sealink-lab in cargo's output" >&2; exit 1; }
  echo "make-kit: cargo test --release -p sealink-gpu --features cuda --no-run" >&2
  (cd "$root" && cargo test --release -p sealink-gpu --features cuda --no-run --message-format=json) >"$json"
  local tests=()
  while read -r b; do tests+=("$b"); done < <(json_executables test <"$json")
  rm -f "$json"
  [ "${#tests[@]}" -gt 0 ] || { echo "make-kit: no test binary in cargo's output" >&2; exit 1; }

  {
    echo "kit made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(ldd --version 2>&1 | head -n 1)"
    echo "repository: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown) ($(git -C "$root" rev-parse --abbrev-ref HEAD 2>/dev/null || echo '?'))$(git -C "$root" diff --quiet HEAD -- crates Cargo.lock 2>/dev/null || echo ', crates/ modified')"
    echo "rustc: $(rustc -V 2>/dev/null || echo unknown); features: cuda"
  } >"$kit/VERSIONS"
  strip -o "$kit/bin/sealink-lab" "$lab"
  echo "sealink-lab: $lab, built $(date -u -r "$lab" +%Y-%m-%dT%H:%M:%SZ), $("$kit/bin/sealink-lab" --version), sha256 $(sha256sum "$kit/bin/sealink-lab" | cut -c1-16)" >>"$kit/VERSIONS"
  for b in "${tests[@]}"; do
    # cargo names them <target>-<hash>: test-sealink_gpu (unit tests), test-gpu (tests/gpu.rs).
    name="test-$(basename "$b" | sed 's/-[0-9a-f]*$//')"
    strip -o "$kit/bin/$name" "$b"
    echo "$name: $b, built $(date -u -r "$b" +%Y-%m-%dT%H:%M:%SZ), $("$kit/bin/$name" --list 2>/dev/null | grep -c ': test$') tests, sha256 $(sha256sum "$kit/bin/$name" | cut -c1-16)" >>"$kit/VERSIONS"
  done

  # OpenSSL's libcrypto (and libssl, which openssl-sys links too) travel in the kit: the
  # binaries find them in ../lib (DT_RPATH), as bench/tunnels-device.sh's do.
  rm -rf "$kit/lib"
  mkdir -p "$kit/lib"
  local l
  for l in $(ldd "$kit/bin/sealink-lab" | awk '$1 ~ /^lib(ssl|crypto)\.so/ && $3 ~ /^\// {print $3}'); do
    cp -L "$l" "$kit/lib/$(basename "$l")"
    patchelf --force-rpath --set-rpath '$ORIGIN' "$kit/lib/$(basename "$l")"
    local pkg="" f
    for f in "$l" "$(readlink -f "$l")" "/usr$l" "${l#/usr}"; do
      pkg="$(dpkg -S "$f" 2>/dev/null | head -n 1 | cut -d: -f1)" && [ -n "$pkg" ] && break
    done
    echo "lib: $(basename "$l") from $l (${pkg:-no package})" >>"$kit/VERSIONS"
  done
  for b in "$kit"/bin/*; do
    patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b"
  done

  # Each must run with nothing but the machine's glibc (and libgcc_s), the kit's libraries and
  # an empty environment.
  local bad=0 libs
  for b in "$kit"/bin/*; do
    libs="$(objdump -p "$b" | awk '$1 == "NEEDED" {print $2}' | tr '\n' ' ')"
    echo "$(basename "$b") needs: $libs" >>"$kit/VERSIONS"
    for l in $libs; do
      case "$l" in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*.so.* | libgcc_s.so.*) ;;
        *) [ -e "$kit/lib/$l" ] || { echo "make-kit: $(basename "$b") links $l, which a bare machine may lack" >&2; bad=1; } ;;
      esac
    done
    case "$(basename "$b")" in
      sealink-lab) env -i PATH=/usr/bin:/bin "$b" --version >/dev/null ;;
      *) env -i PATH=/usr/bin:/bin "$b" --list >/dev/null ;;
    esac || { echo "make-kit: $b does not run" >&2; bad=1; }
  done
  [ "$bad" = 0 ] || exit 1
  need="$(for b in "$kit"/bin/* "$kit"/lib/*; do objdump -T "$b" 2>/dev/null | grep -o 'GLIBC_[0-9.]*'; done |
    sed 's/GLIBC_//' | sort -uV | tail -n 1)"
  echo "needs glibc: ${need:-unknown}" >>"$kit/VERSIONS"
  echo "make-kit: $(du -sh "$kit" | cut -f1) in $kit ($(ls "$kit/bin" | wc -l) programs)" >&2
  cat "$kit/VERSIONS"
}

if [ "${1:-}" = "--make-kit" ]; then
  make_kit "${2:?usage: gpu-device.sh --make-kit DIR}"
  exit 0
fi

usage="usage: gpu-device.sh KIT OUTDIR   (or --make-kit DIR)"
kit="${1:?$usage}"
out="${2:?$usage}"
kit="$(cd "$kit" && pwd)"
lab="$kit/bin/sealink-lab"
[ -x "$lab" ] || { echo "gpu-device: $lab missing: not a kit (make one with --make-kit)" >&2; exit 1; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
total_s="${TOTAL_S:-360}"
t_start="$(date +%s)"
plan_name="${PLAN:-gpu}"
case "$plan_name" in
  gpu | lab) ;;
  *) echo "gpu-device: PLAN=$plan_name: gpu or lab" >&2; exit 1 ;;
esac

name="$plan_name-device-$(date -u +%Y%m%dT%H%M%SZ)"
stage="$(mktemp -d /tmp/gpu-device.XXXXXX)"
dir="$stage/$name"
mkdir -p "$dir"
archive="$out/$name.tar.gz"

# (Re)writes the one archive from what the run has so far.
pack() {
  tar -C "$stage" -czf "$archive.tmp" "$name" && mv -f "$archive.tmp" "$archive"
}

load() {
  uptime 2>/dev/null || echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (/proc/loadavg)"
}

# LIST (comma separated) without the counts above the machine's cores; the core count is added
# when something was dropped.
cap_workers() {
  local w n="$1" kept=() dropped=0
  for w in ${2//,/ }; do
    if [ "$w" -le "$n" ]; then kept+=("$w"); else dropped=1; fi
  done
  if [ "$dropped" = 1 ] && [[ " ${kept[*]} " != *" $n "* ]]; then kept+=("$n"); fi
  local IFS=,
  echo "${kept[*]}"
}

# The plan: step, time limit (s), bench budget (s; - for none). The limits, `timeout`'s kill
# grace (KILL_S per step), the set-up and the archive (SETUP_S) fit in TOTAL_S.
# Each bench's limit is its budget plus what a budget does not cover: the first point, which
# is measured whole, and the report, the SVG plots and the run record written at the end.
KILL_S=3 SETUP_S=12
L_GPU=75 B_GPU=60
L_TC=70 B_TC=55
L_S12=50 B_S12=38
L_S16=55 B_S16=42
# PLAN=lab (the steps add up, with the tests, the kill grace and the set-up, to 358 s).
L_GPUP=62 B_GPUP=48
L_TCO=48 B_TCO=37
L_TT=32
L_SA=40 B_SA=30
L_SD=40 B_SD=32
L_S3=55 B_S3=44
test_limit() {
  if [ "$1" = test-gpu ]; then
    if [ "$plan_name" = lab ]; then echo 25; else echo 45; fi
  else
    echo 20
  fi
}
plan=()
failed=()

# Runs one step under `timeout`: run_step NAME LIMIT BUDGET CMD... (a BUDGET other than - is
# passed as --budget). The limit is cut to what is left of TOTAL_S, and the budget by as much.
run_step() {
  local step="$1" limit="$2" budget="$3" rc t0 t1 left margin args
  shift 3
  left=$((t_start + total_s - KILL_S - 4 - $(date +%s)))
  if [ "$left" -lt "$limit" ]; then
    echo "gpu-device: $step: ${left} s left of ${total_s}, the limit cut from $limit s"
    [ "$budget" = - ] || budget=$((budget - (limit - left)))
    limit="$left"
  fi
  if [ "$limit" -lt 8 ] || { [ "$budget" != - ] && [ "$budget" -lt 5 ]; }; then
    echo "gpu-device: ==== $step: SKIPPED, no time left"
    printf '%s\tskipped\t0\t%s\t%s\n' "$step" "$limit" "$budget" >>"$dir/status.tsv"
    failed+=("$step")
    return 0
  fi
  args=("$@")
  [ "$budget" = - ] || args+=(--budget "$budget")
  echo "gpu-device: ==== $step (limit $limit s$([ "$budget" = - ] || echo ", budget $budget s")), $(date -u +%H:%M:%S)"
  echo "gpu-device: ${args[*]#"$kit/bin/"}"
  t0="$(date +%s.%N)"
  timeout -k "$KILL_S" "$limit" "${args[@]}" </dev/null 2>&1 | tee "$dir/$step.log"
  rc="${PIPESTATUS[0]}"
  t1="$(date +%s.%N)"
  local secs
  secs="$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')"
  echo "gpu-device: $step: exit $rc after $secs s"
  printf '%s\t%s\t%s\t%s\t%s\n' "$step" "$rc" "$secs" "$limit" "$budget" >>"$dir/status.tsv"
  [ "$rc" = 0 ] || failed+=("$step")
  {
    echo "==== $step: exit $rc, $secs s (limit $limit s, budget $budget s)"
    case "$step" in
      test-*) grep -E '^test result|^running [0-9]+ tests?|SKIP|FAILED|panicked' "$dir/$step.log" | awk '!seen[$0]++' | head -n 40 ;;
      *) grep -E 'budget:|not measured|Error|error:' "$dir/$step.log" | head -n 10
         echo "--- what it printed (first 60 lines)"
         head -n 60 "$dir/$step.log" ;;
    esac
    echo
  } >>"$dir/summary.txt"
  load
  pack
}

main() {
  local ncpu tc_workers tt_threads gpu_workers gpu_sizes b nvrtc sum=0 s
  ncpu="$(nproc)"
  echo "gpu-device: $name, $(date -u +%Y-%m-%dT%H:%M:%SZ), kit $kit, archive $archive"
  # cudarc looks for libnvrtc.so by its usual names; CUDA 13 keeps it under targets/.
  nvrtc="$(find /usr/local -name 'libnvrtc.so*' -not -path '*stubs*' 2>/dev/null | grep -v builtins | head -n 1 || true)"
  if [ -n "$nvrtc" ]; then export LD_LIBRARY_PATH="$(dirname "$nvrtc"):${LD_LIBRARY_PATH:-}"; fi
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "uname: $(uname -a)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "nproc: $ncpu (all: $(nproc --all))"
    echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>/dev/null | head -n 1 || echo unknown)"
    echo "load: $(cat /proc/loadavg)"
    grep -E '^(MemTotal|MemAvailable)' /proc/meminfo
    echo "NVRTC: ${nvrtc:-not found under /usr/local}"
    echo "libcuda: $(ldconfig -p 2>/dev/null | grep -m1 'libcuda.so' | sed 's/.*=> //' | grep . || echo "not in ldconfig's cache")"
    echo "--- nvidia-smi"
    if command -v nvidia-smi >/dev/null; then
      timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,compute_mode --format=csv 2>&1 || true
      timeout 20 nvidia-smi 2>&1 || true
    else
      echo "(no nvidia-smi)"
    fi
    echo "--- os-release"
    cat /etc/os-release 2>/dev/null || echo "(none)"
    echo "--- lscpu"
    lscpu 2>&1 || grep -E '^(model name|flags)' /proc/cpuinfo | sort -u
  } >"$dir/machine.txt"
  # Paper 003's SO_CRYPT today is kTLS (TCP_ULP "tls", then TLS_TX/TLS_RX): whether this
  # kernel offers it. Read only: nothing is loaded.
  {
    echo "kernel: $(uname -r)"
    echo "tcp_available_ulp: $(cat /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null || echo '(unreadable)')"
    if [ -d /sys/module/tls ]; then echo "tls module: loaded (/sys/module/tls)"; else echo "tls module: not loaded"; fi
    echo "tls module on disk: $(find "/lib/modules/$(uname -r)" -name 'tls.ko*' 2>/dev/null | head -n 1 | grep . || echo 'none found')"
    echo "CONFIG_TLS: $(grep -h '^CONFIG_TLS[=_]' "/boot/config-$(uname -r)" 2>/dev/null | tr '\n' ' ' | grep . || echo 'no /boot/config for this kernel')"
    if grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null; then
      echo "verdict: kTLS offered (the tls ULP is available)"
    else
      echo "verdict: the tls ULP is not offered now (it may still load on first use if the module is on disk)"
    fi
  } >"$dir/ulp.txt"
  cat "$dir/machine.txt" "$dir/ulp.txt"
  {
    cat "$kit/VERSIONS" 2>/dev/null || echo "(no VERSIONS in the kit)"
    echo "--- here"
    for b in "$kit"/bin/*; do echo "$(basename "$b"): sha256 $(sha256sum "$b" | cut -c1-16)"; done
    echo "sealink-lab --version: $("$lab" --version 2>&1)"
    local need have
    need="$(sed -n 's/^needs glibc: //p' "$kit/VERSIONS" 2>/dev/null)"
    have="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
    if [ -n "$need" ] && [ -n "$have" ] &&
      [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; then
      echo "WARNING: the kit needs glibc $need, this machine has $have"
    fi
  } >"$dir/kit.txt" 2>&1
  cat "$dir/kit.txt"

  tc_workers="${TC_WORKERS:-$(cap_workers "$ncpu" 1,2,4,8,16,24,32)}"
  gpu_workers="$(cap_workers "$ncpu" "${GPU_WORKERS:-1,4,16}")"
  gpu_sizes="${GPU_SIZES:-4096,65536,131072,1048576}"

  # The plan (step, limit, budget). The GPU tests: a few seconds on an H100 (NVRTC compiles
  # the kernels once per test); the limits only stop a hang.
  for b in "$kit"/bin/test-*; do
    s="$(basename "$b")"
    plan+=("$s $(test_limit "$s") -")
  done
  if [ "$plan_name" = lab ]; then
    tc_workers="${TC_WORKERS:-$(cap_workers "$ncpu" 1,2,4,8,12,16)}"
    tt_threads="$(cap_workers "$ncpu" 1,2,4,8,12,16)"
    plan+=("gpu-packet $L_GPUP $B_GPUP" "tunnel-cores $L_TCO $B_TCO" "thread-times $L_TT -"
      "stacks-12-aes $L_SA $B_SA" "stacks-12-des $L_SD $B_SD" "stacks-12-3des $L_S3 $B_S3")
  else
    plan+=("gpu $L_GPU $B_GPU" "tunnel-cores $L_TC $B_TC" "stacks-12 $L_S12 $B_S12" "stacks-16 $L_S16 $B_S16")
  fi
  echo "gpu-device: the plan ($ncpu CPUs; total ${total_s} s):"
  printf '  %-18s %8s %8s\n' step limit_s budget_s
  for s in "${plan[@]}"; do
    read -r b l g <<<"$s"
    printf '  %-18s %8s %8s\n' "$b" "$l" "$g"
    sum=$((sum + l + KILL_S))
  done
  printf '  %-18s %8s\n' "set-up, archive" "$SETUP_S"
  sum=$((sum + SETUP_S))
  echo "  = at most $sum s if every step runs to its limit ($((sum / 60)) min $((sum % 60)) s; the limit is $total_s s)"
  if [ "$plan_name" = lab ]; then
    echo "  tunnel-cores workers: $tc_workers (--order-each); thread-times threads: $tt_threads; bench gpu --packet-size CPU threads: $gpu_workers"
    [ "$ncpu" -ge 12 ] || echo "  (stacks at 12 workers on $ncpu CPUs: oversubscribed, a check of the script, not a figure)"
  else
    echo "  tunnel-cores workers: $tc_workers; bench gpu CPU workers: $gpu_workers, sizes $gpu_sizes"
    [ "$ncpu" -ge 16 ] || echo "  (stacks at 12 and 16 workers on $ncpu CPUs: oversubscribed, a check of the script, not a figure)"
  fi
  [ "$sum" -le "$total_s" ] || echo "gpu-device: WARNING: the plan is over $total_s s; the last steps will be cut"
  printf 'step\trc\tseconds\tlimit_s\tbudget_s\n' >"$dir/status.tsv"
  : >"$dir/summary.txt"
  pack
  load

  for b in "$kit"/bin/test-*; do
    s="$(basename "$b")"
    run_step "$s" "$(test_limit "$s")" - "$b" --nocapture
  done
  if [ "$plan_name" = lab ]; then
    run_step gpu-packet "$L_GPUP" "$B_GPUP" "$lab" bench gpu --packet-size \
      --strategy naive,naive-streams,no-streams,streams --workers "$gpu_workers" --runs 3 --seconds 0.2 \
      --out "$dir/gpu-packet"
    run_step tunnel-cores "$L_TCO" "$B_TCO" "$lab" bench tunnel-cores --batch 128 --workers "$tc_workers" \
      --order-each --runs 3 --out "$dir/tunnel-cores"
    run_step thread-times "$L_TT" - "$lab" bench thread-times --threads "$tt_threads" --volume 134217728 \
      --tests 3 --out "$dir/thread-times"
    run_step stacks-12-aes "$L_SA" "$B_SA" "$lab" bench stacks --workers 12 --stacks aes128-gcm \
      --runs 2 --seconds 0.1 --out "$dir/stacks-12-aes"
    # DES and 3-DES seal a 192-packet batch of 4 KiB in 0.05-0.3 s per worker, which is what
    # made their windows drain past the budget (§33, §42e): batches of 32 here, and a step
    # (and budget) each, so that one running long does not cost the other its turn.
    run_step stacks-12-des "$L_SD" "$B_SD" "$lab" bench stacks --workers 12 --stacks des-md5 \
      --batch 32 --runs 2 --seconds 0.1 --out "$dir/stacks-12-des"
    run_step stacks-12-3des "$L_S3" "$B_S3" "$lab" bench stacks --workers 12 --stacks 3des-md5 \
      --batch 32 --runs 2 --seconds 0.1 --out "$dir/stacks-12-3des"
  else
  run_step gpu "$L_GPU" "$B_GPU" "$lab" bench gpu --strategy naive,naive-streams,no-streams,streams \
    --sizes "$gpu_sizes" --workers "$gpu_workers" --runs 3 --out "$dir/gpu"
  run_step tunnel-cores "$L_TC" "$B_TC" "$lab" bench tunnel-cores --batch 128 --workers "$tc_workers" \
    --runs 3 --out "$dir/tunnel-cores"
  run_step stacks-12 "$L_S12" "$B_S12" "$lab" bench stacks --workers 12 --stacks baseline,md5,des-md5,aes128-gcm \
    --runs 3 --seconds 0.2 --out "$dir/stacks-12"
  run_step stacks-16 "$L_S16" "$B_S16" "$lab" bench stacks --workers 16 --stacks baseline,md5,des-md5,aes128-gcm \
    --runs 3 --seconds 0.2 --out "$dir/stacks-16"
  fi

  local took=$(($(date +%s) - t_start))
  echo "gpu-device: done, $(date -u +%Y-%m-%dT%H:%M:%SZ), ${took} s in all (limit $total_s s)"
  {
    echo "==== status (step, exit status, seconds, limit, budget); ${took} s in all"
    cat "$dir/status.tsv"
    echo "==== the kernel's TLS ULP (paper 003 today)"
    cat "$dir/ulp.txt"
  } | tee -a "$dir/summary.txt"
  if [ "${#failed[@]}" -gt 0 ]; then
    echo "gpu-device: FAILED: ${failed[*]} (exit status 124: stopped by its limit)"
    return 1
  fi
}

set +e +o pipefail
main 2>&1 | tee "$dir/run.log"
rc="${PIPESTATUS[0]}"
pack && echo "gpu-device: archive $archive ($(du -h "$archive" | cut -f1))"
rm -rf "$stage"
exit "$rc"
