# syntax=docker/dockerfile:1
# The lineage image: `lineage`, `lineage-sandbox-exec` and `lineage-acp-testagent` on PATH
# /bin/sh (the Helm chart's voter entrypoint snippet needs it), bubblewrap (the agent sandboxes),
# running as uid/gid 10001 (the chart's podSecurityContext). Build from the repository root:
#
#   docker build -t lineage:0.1.0 .          # or: podman build -t lineage:0.1.0 .
#
# The tag is the chart's appVersion (charts/lineage/Chart.yaml), which is the workspace version.
# scripts/check-image.sh checks this file (hadolint or a parser check) and that the paths copied
# below are where `cargo build --release` puts the binaries.

# The Rust version must be at least the highest `rust-version` of the locked dependencies
# (scripts/check-image.sh checks it against `cargo metadata`).
ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# ---------------------------------------------------------------- build
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
# Cargo's default target dir (<workspace>/target), stated so the COPY paths below cannot drift.
ENV CARGO_TARGET_DIR=/src/target \
    CARGO_TERM_COLOR=never
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo build --release --locked -p lineage -p lineage-acp-testagent \
    && /src/target/release/lineage --version \
    && test -x /src/target/release/lineage-acp-testagent

# ---------------------------------------------------------------- runtime
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="lineage" \
      org.opencontainers.image.description="Distributed coordinator for AI agents that spawn child agents: worker nodes on NATS, an openraft registry." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/lineage-dev/lineage" \
      org.opencontainers.image.url="https://github.com/lineage-dev/lineage"
# bubblewrap (`bwrap`, not setuid in Debian): the per-session agent sandboxes (profile key
# `isolation`; the node probes it at start). It needs no capability, only a kernel and a pod that
# allow unprivileged user namespaces (the chart's `sandbox.enabled`); where they are refused,
# `isolation = "auto"` runs agents without a sandbox and the node's log says so. Not pinned:
# DEBIAN_RELEASE decides the version (a pin would break the other releases and security updates).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && bwrap --version
# The lineage user (10001:10001, no login shell) and the directories the chart mounts over:
# /etc/lineage (config, NATS secrets) and /var/lib/lineage (node.data_dir).
RUN groupadd --system --gid 10001 lineage \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/lineage --no-create-home \
       --shell /usr/sbin/nologin lineage \
    && mkdir -p /etc/lineage /var/lib/lineage \
    && chown 10001:10001 /var/lib/lineage
# CA bundle for `tls://` NATS URLs verified against public CAs (rustls reads the system store).
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /src/target/release/lineage /usr/local/bin/lineage
# A warm agent sandbox's first program; a node looks for it beside `lineage`.
COPY --from=build /src/target/release/lineage-sandbox-exec /usr/local/bin/lineage-sandbox-exec
COPY --from=build /src/target/release/lineage-acp-testagent /usr/local/bin/lineage-acp-testagent
USER 10001:10001
WORKDIR /var/lib/lineage
EXPOSE 9464
ENTRYPOINT ["lineage"]
CMD ["--help"]
