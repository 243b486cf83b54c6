# gpumeter in a container: one image for migrate, serve and collect
# (docker-compose.yaml, deploy/kubernetes). go-nvml loads libnvidia-ml at
# run time (dlopen), so the binary needs cgo and a glibc base; the NVIDIA
# container runtime mounts the driver library into collector containers on
# GPU hosts, and the image carries none of it.

# Build stage: Go with gcc (cgo).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# -Wno-deprecated-declarations: as in the Makefile, hides go-nvml's warnings
# for NVML functions its header marks deprecated. -trimpath keeps the build
# machine's paths out of the binary.
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
    go build -trimpath -o /out/gpumeter ./cmd/gpumeter

# Runtime stage: Debian slim (glibc for the cgo binary and libnvidia-ml),
# CA certificates for TLS to ClickHouse (secure=true) and webhook
# endpoints, time zone data for tenants' billing zones, bash for the
# compose health checks. No compiler, no Go toolchain.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/*
# A fixed numeric uid, so Kubernetes' runAsNonRoot can check it
# (deploy/kubernetes/server.yaml runs as 10001). The spool directory is
# the user's so a named volume there (docker-compose.yaml) starts writable.
RUN groupadd --system --gid 10001 gpumeter \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin gpumeter \
    && mkdir -p /var/lib/gpumeter/spool \
    && chown -R 10001:10001 /var/lib/gpumeter
COPY --from=build /out/gpumeter /usr/local/bin/gpumeter
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/gpumeter"]
