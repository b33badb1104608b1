# pdrouter container image (Debian 12). The build stage runs the README's steps
# (scripts/install-deps, scripts/build); the runtime stage holds the binary, the Debian
# libraries it links, and a non-root user. Not built in CI.
#
#   docker build -t pdrouter:0.1.0 .
#   docker run --rm -p 8000:8000 pdrouter:0.1.0 --demo
#   docker run --rm -p 8000:8000 -v $PWD/router.yaml:/etc/pdrouter/router.yaml:ro \
#     pdrouter:0.1.0 --config /etc/pdrouter/router.yaml
#
# The Helm chart (helm/pdrouter) runs `pdrouter --config /etc/pdrouter/router.yaml` from it.

FROM debian:bookworm AS build
# install-deps runs as root here (no sudo); git and the test tools come with it.
WORKDIR /src
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps && rm -rf /var/lib/apt/lists/*
COPY . .
# The binary, and the Debian packages of the shared libraries it links (for the runtime stage).
RUN rm -rf build && scripts/build release \
 && install -D -m 0755 build/release/router/pdrouter /out/usr/local/bin/pdrouter \
 && ldd build/release/router/pdrouter | awk '$3 ~ /^\// {print $3}' \
    | while read -r lib; do dpkg -S "$lib" 2>/dev/null || dpkg -S "$(realpath "$lib")"; done \
    | cut -d: -f1 | sort -u >/out/runtime-packages \
 && cat /out/runtime-packages

FROM debian:bookworm-slim
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive xargs -a /tmp/runtime-packages \
      apt-get install -y -qq --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages \
 && groupadd --system --gid 10001 pdrouter \
 && useradd --system --uid 10001 --gid pdrouter --no-create-home --shell /usr/sbin/nologin pdrouter
COPY --from=build /out/usr/local/bin/pdrouter /usr/local/bin/pdrouter
USER 10001:10001
# 8000: the OpenAI API, /health, /status, /metrics; 7500: the lmcache mode's KV-ready socket
# (--kv-ready-bind tcp://0.0.0.0:7500).
EXPOSE 8000 7500
ENTRYPOINT ["pdrouter"]
CMD ["--help"]
