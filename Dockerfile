# syntax=docker/dockerfile:1
# The gpu-class image. Build from the repository root:
#   docker build -t gpu-class:0.2.0 .

# Build stage: the gpu-class wheel and the wheels of its dependencies.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml setup.cfg README.md ./
COPY webhook/ webhook/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# Runtime stage: the installed wheels and nothing else. The wheels are
# bind-mounted rather than copied, so they leave no layer behind, and pip goes
# once it has installed them.
FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels gpu-class \
    && pip uninstall --yes pip
# The same non-root user the manifests require (runAsUser: 65532).
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gpuclass"]
# Without --config the server uses the catalog built into the image; the
# manifests pass --config to use the mounted catalog instead.
CMD ["serve", "--cert-file", "/etc/gpu-class/tls/tls.crt", "--key-file", "/etc/gpu-class/tls/tls.key", "--bind", "0.0.0.0:8443"]
