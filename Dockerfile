# mcp-session-proxy container image: a static-ish release binary on a slim Debian base,
# running as an unprivileged user.
#
#   docker build -t mcp-session-proxy .
#   docker run --rm -p 8080:8080 \
#     -e MCP_PROXY_UPSTREAM__URL=http://host.docker.internal:3001/mcp mcp-session-proxy
#
# Configuration: mount a proxy.toml over /etc/mcp-session-proxy/proxy.toml, or set
# MCP_PROXY_* variables (they win over the file). Without an upstream, the embedded demo
# server runs, so the image works on its own.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
# The tests' harness is a member of the workspace: cargo reads its manifest, and builds
# none of it here.
COPY tests/common/Cargo.toml ./tests/common/
RUN cargo build --release --locked --bin mcp-session-proxy

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin mcp
COPY --from=build /src/target/release/mcp-session-proxy /usr/local/bin/mcp-session-proxy
COPY proxy.toml /etc/mcp-session-proxy/proxy.toml
WORKDIR /etc/mcp-session-proxy
# Inside a container the proxy must listen on every interface to be reachable.
ENV MCP_PROXY_LISTEN=0.0.0.0:8080
EXPOSE 8080
USER 10001
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/mcp-session-proxy", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/mcp-session-proxy"]
