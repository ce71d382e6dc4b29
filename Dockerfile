# Kowloon image: kowloon-gateway, kowloon-compute and the CUDA plugin in one
# image, laid out as /opt/kowloon/{bin,lib,sql,openapi,ui} (the binaries find
# sql/, ui/ and lib/kowloon-cuda.so next to bin/). The dashboard's charts need
# Chart.js (--chartjs-dir), which the image does not carry: it shows tables. The same image serves GPU and
# CPU nodes: without a GPU the plugin does not load and the node runs on the
# CPU. The runtime stage is NVIDIA's CUDA runtime image, which carries the
# CUDA runtime, cuBLAS and NCCL the plugin links; the driver
# (libcuda) comes from the host through the NVIDIA Container Toolkit.
#
#   docker build -t kowloon:local .
#   docker compose up            (see docker-compose.yml)

ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04

# ---------------------------------------------------------------- build ---
FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build

ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        build-essential pkg-config \
        libmicrohttpd-dev libgnutls28-dev libjansson-dev libpq-dev libhiredis-dev libc-ares-dev \
        libcurl4-openssl-dev libopenblas-dev libcmocka-dev libdouble-conversion-dev libssl-dev \
        libgloo-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .
# nvcc is on PATH in the devel image, so the Makefile builds the plugin too;
# fail here rather than ship an image whose GPU nodes silently run on CPU.
RUN make -j"$(nproc)" \
 && test -x bin/kowloon-gateway && test -x bin/kowloon-compute \
 && test -f lib/kowloon-cuda.so
RUN install -d /opt/kowloon/bin /opt/kowloon/lib /opt/kowloon/sql /opt/kowloon/openapi /opt/kowloon/ui \
 && install -m 0755 bin/kowloon-gateway bin/kowloon-compute /opt/kowloon/bin/ \
 && install -m 0644 lib/kowloon-cuda.so /opt/kowloon/lib/ \
 && install -m 0644 openapi/openapi.yaml /opt/kowloon/openapi/ \
 && install -m 0644 ui/*.html ui/*.js ui/*.css ui/*.svg /opt/kowloon/ui/ \
 && if ls sql/*.sql >/dev/null 2>&1; then install -m 0644 sql/*.sql /opt/kowloon/sql/; fi

# -------------------------------------------------------------- runtime ---
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}

LABEL org.opencontainers.image.title="kowloon" \
      org.opencontainers.image.description="Kowloon GPU job service: gateway and compute node"

# Runtime halves of the build dependencies (Ubuntu 24.04 names), and curl for
# the compose health checks. Gloo (CPU collectives of multi-node jobs) comes
# as libgloo-dev: its runtime library's package name is not the same in
# every release, the dev package's is. cudart, cuBLAS and NCCL (libnccl2) are
# in the CUDA runtime image; NCCL is installed from NVIDIA's apt repository
# (configured in the image) should a runtime tag ever come without it.
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libmicrohttpd12t64 libgnutls30t64 libjansson4 libpq5 libhiredis1.1.0 libc-ares2 \
        libcurl4t64 libopenblas0 libdouble-conversion3 libssl3t64 curl ca-certificates \
        libgloo-dev \
 && { ldconfig -p | grep -q 'libnccl\.so\.2' \
      || apt-get install -y --no-install-recommends libnccl2; } \
 && rm -rf /var/lib/apt/lists/*

COPY --from=build /opt/kowloon /opt/kowloon

# Every shared library the binaries and the plugin link must resolve here
# (libcuda is not linked: the CUDA runtime loads it from the host's driver).
RUN missing="$(ldd /opt/kowloon/bin/* /opt/kowloon/lib/*.so | grep 'not found' || true)"; \
    if [ -n "$missing" ]; then echo "unresolved libraries:"; echo "$missing"; exit 1; fi

# A fixed uid/gid: Kubernetes' runAsUser/fsGroup (deploy/k8s) name it, and
# a numeric USER lets the kubelet check runAsNonRoot.
RUN groupadd --system --gid 10001 kowloon \
 && useradd --system --uid 10001 --gid 10001 --home-dir /opt/kowloon --no-create-home \
        --shell /usr/sbin/nologin kowloon \
 && install -d -o kowloon -g kowloon /var/lib/kowloon/blobs \
 && install -d -m 0700 -o kowloon -g kowloon /var/lib/kowloon/secrets /var/lib/kowloon/node
# /var/lib/kowloon/node: a node's credential (KOWLOON_STATE_DIR, one 0600
# file); /var/lib/kowloon/secrets: the cluster token, when compose makes it
# (KOWLOON_CLUSTER_TOKEN_FILE). Volumes mounted there start from these
# directories, owned by the image's user and closed to others.
USER 10001:10001
WORKDIR /opt/kowloon
ENV PATH=/opt/kowloon/bin:${PATH}

# 8080: the gateway's public API; 8081: the gateway's cluster listener (what
# nodes call), or a compute node's own API in a node's container.
ENV KOWLOON_STATE_DIR=/var/lib/kowloon/node
EXPOSE 8080 8081
CMD ["kowloon-gateway", "serve"]
