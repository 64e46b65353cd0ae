# syntax=docker/dockerfile:1
# mcp-warden: the gateway and the bundled demo notes server, in a small image
# that runs as an unprivileged user.
#
#   docker build -t mcp-warden .
#   docker run --rm -p 8931:8931 -p 9464:9464 mcp-warden
#
# serves the demo (deploy/docker/warden.toml) at http://localhost:8931/mcp, with
# /healthz and /readyz on both ports and /metrics on 9464. In Kubernetes the
# ConfigMap in deploy/kubernetes/ replaces the config file (docs/deploy.md).

# --- build: the Rust toolchain, at least the workspace's rust-version -----------
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# --locked: the image is built from Cargo.lock as committed.
RUN cargo build --release --locked -p mcp-warden --bin mcp-warden --bin warden-demo-notes

# --- runtime: Debian slim (glibc as in the build stage; `sleep` for preStop) ----
FROM debian:bookworm-slim AS runtime
# rustls carries its own root certificates and SQLite is built in: nothing to install.
RUN groupadd --system --gid 10001 warden \
 && useradd --system --uid 10001 --gid warden --home-dir /var/lib/mcp-warden --shell /usr/sbin/nologin warden \
 && install -d -o warden -g warden -m 0750 /var/lib/mcp-warden
COPY --from=build /src/target/release/mcp-warden /usr/local/bin/mcp-warden
COPY --from=build /src/target/release/warden-demo-notes /usr/local/bin/warden-demo-notes
COPY deploy/docker/warden.toml /etc/mcp-warden/warden.toml
ENV MCP_WARDEN_CONFIG=/etc/mcp-warden/warden.toml
# The HTTP front (/mcp, /healthz, /readyz) and the admin listener (/metrics, /healthz, /readyz).
EXPOSE 8931 9464
USER 10001:10001
WORKDIR /var/lib/mcp-warden
# SIGTERM drains (gateway.drain_timeout); give `docker stop` as long: --time 40.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/mcp-warden"]
CMD ["run"]
