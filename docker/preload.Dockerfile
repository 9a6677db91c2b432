# An existing PyTorch server, unchanged, with memoplan's LD_PRELOAD shim as the malloc of its
# model workers: TorchServe, installed from PyPI on the official Python image. Not built here (no
# Docker engine runs in this project's CI); what it relies on is described in docs/SERVE.md.
#
#   docker build -f docker/preload.Dockerfile -t torchserve-memoplan .   # from the repository root
#   docker run --rm -p 8080:8080 -v $PWD/model-store:/home/model-server/model-store \
#     torchserve-memoplan --models resnet18=resnet18.mar
#
# The shim is built in a stage of its own on Debian 12 (bookworm), the release python:3.11-slim-
# bookworm is made from, so the library finds the glibc (2.34 or later) and libunwind8 it was
# built against. It needs no LibTorch: the configure line below finds only nlohmann_json, fmt,
# CLI11, zlib and libunwind (the line and the build of the target were run on a Debian 12 host;
# the image itself is not built here). mimalloc 2, the shim's fallback for what it does not plan,
# is compiled in from Debian's source (scripts/mimalloc_source.sh), as scripts/build.sh does: the
# runtime image needs no libmimalloc, and gets mimalloc's MIT notice in the shim's copyright file.
# pytorch/torchserve tags are Ubuntu releases with an older glibc: to use one, build the shim in a
# stage FROM that image instead.
FROM debian:bookworm AS shim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake ninja-build g++ pkg-config libunwind-dev nlohmann-json3-dev libfmt-dev libcli11-dev \
      zlib1g-dev xz-utils \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src/memoplan
COPY . .
RUN mimalloc="$(scripts/mimalloc_source.sh /opt/mimalloc)" \
 && cmake -S . -B build-shim -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON -DMEMOPLAN_BUILD_TESTS=OFF \
      -DMEMOPLAN_BUILD_BENCH=OFF -DMEMOPLAN_WITH_CBC=OFF -DMEMOPLAN_MIMALLOC_SOURCE="$mimalloc" \
 && cmake --build build-shim --target memoplan_preload

FROM python:3.11-slim-bookworm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless libunwind8 libstdc++6 zlib1g \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir torch torchvision --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir torchserve==0.12.0 torch-model-archiver==0.12.0

COPY --from=shim /src/memoplan/build-shim/interpose/libmemoplan_preload.so /usr/local/lib/
COPY --from=shim /src/memoplan/build-shim/interpose/copyright \
     /usr/share/doc/libmemoplan-preload/copyright
# Only the Python model workers get the shim, not TorchServe's Java frontend: TorchServe starts
# each worker with the `python` of its config, which is this wrapper. One intra-op thread per
# worker: the shim plans each thread's pass, and OpenMP helpers' allocations are not planned.
RUN printf '%s\n' '#!/bin/sh' \
      'export OMP_NUM_THREADS=1' \
      'export LD_PRELOAD=/usr/local/lib/libmemoplan_preload.so' \
      'exec python3 "$@"' > /usr/local/bin/python-memoplan \
 && chmod +x /usr/local/bin/python-memoplan \
 && mkdir -p /home/model-server/model-store \
 && printf '%s\n' 'inference_address=http://0.0.0.0:8080' \
      'management_address=http://127.0.0.1:8081' \
      'metrics_address=http://127.0.0.1:8082' \
      'python=/usr/local/bin/python-memoplan' \
      'default_workers_per_model=2' > /home/model-server/config.properties
# The shim's options (docs/SHIM.md): statistics at each worker's exit, in TorchServe's model log.
ENV MEMOPLAN_CONF=stats_print:true

WORKDIR /home/model-server
EXPOSE 8080
ENTRYPOINT ["torchserve", "--foreground", "--start", "--disable-token-auth", \
            "--ts-config", "/home/model-server/config.properties", \
            "--model-store", "/home/model-server/model-store"]
CMD ["--models", "all"]
