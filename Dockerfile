# gpumeter in a container. go-nvml loads libnvidia-ml at run time (dlopen),
# so the binary needs cgo and a glibc base; the NVIDIA container toolkit
# mounts the driver library into collector containers on GPU hosts.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# -Wno-deprecated-declarations: as in the Makefile, hides go-nvml's warnings
# for NVML functions its header marks deprecated.
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -o /out/gpumeter ./cmd/gpumeter

FROM debian:bookworm-slim
RUN useradd --system --no-create-home gpumeter && mkdir -p /var/lib/gpumeter/spool && chown gpumeter /var/lib/gpumeter/spool
COPY --from=build /out/gpumeter /usr/local/bin/gpumeter
USER gpumeter
ENTRYPOINT ["/usr/local/bin/gpumeter"]
