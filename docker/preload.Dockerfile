# An existing PyTorch server, unchanged, with memoplan's LD_PRELOAD shim as the malloc of its
# model workers: TorchServe, installed from PyPI on the official Python image. Not built here (no
# Docker engine runs in this project's CI); what it relies on is described in docs/SERVE.md.
#
#   docker build -f docker/Dockerfile -t memoplan-serve .              # builds the shim too
#   docker build -f docker/preload.Dockerfile -t torchserve-memoplan .
#   docker run --rm -p 8080:8080 -v $PWD/model-store:/home/model-server/model-store \
#     torchserve-memoplan --models resnet18=resnet18.mar
#
# Why python:3.11-slim-bookworm and not pytorch/torchserve: the shim built in the memoplan image
# needs glibc 2.34 or later and Debian 12's libunwind8, and pytorch/torchserve tags are Ubuntu
# releases with an older glibc (the library would not load). To use such an image, build the shim
# in a stage FROM that image instead of copying it.
ARG MEMOPLAN_IMAGE=memoplan-serve
FROM ${MEMOPLAN_IMAGE} AS memoplan

FROM python:3.11-slim-bookworm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless libunwind8 libstdc++6 zlib1g \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir torch torchvision --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir torchserve==0.12.0 torch-model-archiver==0.12.0

COPY --from=memoplan /src/memoplan/build/interpose/libmemoplan_preload.so /usr/local/lib/
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
