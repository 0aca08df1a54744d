# syntax=docker/dockerfile:1
# The gpu-class image. Build from the repository root:
#   docker build -t gpu-class:0.2.0 .

# A release builds FROM the base by digest (.ci/release passes python@sha256:...
# and records it); the tag is for a build by hand.
ARG BASE_IMAGE=python:3.12-slim

# Build stage: the wheels of the locked dependencies, every file checked against
# the lock's hashes, and the gpu-class wheel, built by the locked setuptools.
# SOURCE_DATE_EPOCH: the same sources give the same wheel (zip times).
FROM ${BASE_IMAGE} AS build
ENV SOURCE_DATE_EPOCH=315532800
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements-build.lock \
    && pip wheel --no-cache-dir --require-hashes --wheel-dir /wheels -r requirements.lock
COPY pyproject.toml setup.cfg README.md ./
COPY webhook/ webhook/
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

# Runtime stage: the installed wheels and nothing else. The wheels are
# bind-mounted rather than copied, so they leave no layer behind, and pip goes
# once it has installed them.
# SOURCE_DATE_EPOCH makes pip compile hash-based .pyc files, the same in every
# build, rather than ones stamped with the install's time.
FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    --mount=type=bind,from=build,source=/src/requirements.lock,target=/requirements.lock \
    SOURCE_DATE_EPOCH=315532800 pip install --no-cache-dir --no-index --find-links=/wheels \
        --require-hashes -r /requirements.lock \
    && SOURCE_DATE_EPOCH=315532800 pip install --no-cache-dir --no-index --no-deps /wheels/gpu_class-*.whl \
    && pip uninstall --yes pip
# The same non-root user the manifests require (runAsUser: 65532).
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gpuclass"]
# Without --config the server uses the catalog built into the image; the
# manifests pass --config to use the mounted catalog instead.
CMD ["serve", "--cert-file", "/etc/gpu-class/tls/tls.crt", "--key-file", "/etc/gpu-class/tls/tls.key", "--bind", "0.0.0.0:8443"]
