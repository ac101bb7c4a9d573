# Dockerfile: strata in a container (two stages).
#
#   docker build -t strata .
#   docker run -d -p 8080:8080 -v /srv/models:/models:ro \
#     -e STRATA_MODEL=/models/model.gguf --ulimit nofile=65536:65536 strata
#   GPU (NVIDIA container toolkit supplies the Vulkan ICD and /dev/nvidia*):
#     docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics ...
#
# Configuration is the STRATA_* environment (`strata serve --help` lists
# every option). The daemon listens on 0.0.0.0 inside the container, answers
# /health (503 while loading, 200 when ready), drains on SIGTERM and exits 0.
# It sizes its thread pool from the container's CPU quota (--cpus), not the
# host's CPU count (engine/host/sysinfo.c).
#
# io_uring: the default seccomp profiles of Docker (>= 25) and podman refuse
# io_uring_setup; nothing in this image requires io_uring (the expert store
# reads with pread where io_uring is refused).
#
# Verified by tests/deploy/podman.sh (buildah bud + podman run).

# --- build: release build of the one binary ---------------------------------
FROM debian:bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential meson ninja-build pkg-config \
      libmicrohttpd-dev libjansson-dev libpcre2-dev liburing-dev libhwloc-dev libvulkan-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Baseline x86-64 code: the SIMD kernels are chosen at run time (AVX2,
# AVX-512), so the image runs on any x86-64 host.
RUN meson setup /build --buildtype=release -Dtests=false \
 && ninja -C /build cli/strata \
 && install -D -m 0755 /build/cli/strata /out/usr/local/bin/strata

# --- run: slim image, runtime libraries and the Vulkan loader only ----------
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libmicrohttpd12 libjansson4 libpcre2-8-0 liburing2 libhwloc15 libvulkan1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/strata --create-home \
      --shell /usr/sbin/nologin strata
COPY --from=build /out/ /
# Fails the image build if a runtime library is missing.
RUN strata --version
ENV STRATA_HOST=0.0.0.0 \
    STRATA_PORT=8080 \
    STRATA_MODEL=/models/model.gguf
VOLUME ["/models"]
WORKDIR /var/lib/strata
USER strata
EXPOSE 8080
# No curl in the slim image: bash's /dev/tcp asks /health (200 once ready).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10m --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${STRATA_PORT:-8080} && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["strata", "serve"]
