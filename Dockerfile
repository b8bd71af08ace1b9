# syntax=docker/dockerfile:1
# The `echomq` command in a small image: `echomq work` by default, configured
# through ECHOMQ_* variables (docs/deployment.md §Running as a service).
#
#   docker build -t echomq .
#   docker run --rm -e ECHOMQ_URL=redis://redis:6379 -e ECHOMQ_QUEUE=mail echomq

# Build stage: the release binary. The cargo caches are BuildKit cache
# mounts, so a rebuild after a source change recompiles only the workspace.
FROM rust:1.85-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY integration-tests ./integration-tests
COPY lua ./lua
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p echomq-cli \
    && install -D -m 0755 target/release/echomq /out/echomq

# Runtime stage: glibc and nothing else (no shell, no package manager),
# running as the image's unprivileged "nonroot" user (uid 65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/echomq /usr/local/bin/echomq
USER 65532:65532
# Inside a container the probes come from outside the loopback interface.
ENV ECHOMQ_HEALTH_ADDR=0.0.0.0:8080 \
    ECHOMQ_LOG_FORMAT=json \
    ECHOMQ_QUIET=true
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/echomq"]
CMD ["work"]
