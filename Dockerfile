# syntax=docker/dockerfile:1
#
# nodeshim's image: two static binaries on a minimal base, run as the shim
# (`nodeshim serve`, as root in a privileged container) and as the reporter
# (`nodeshim-reporter`, its own small binary, as uid 65532) by
# deploy/daemonset.yaml.
# See docs/deploy.md.
#
#   docker build -t REGISTRY/nodeshim:TAG \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse --short HEAD) .

ARG GO_VERSION=1.26

# Build: cgo for libseccomp (kernel/seccomp), linked statically against
# Debian's libseccomp.a and glibc. netgo and osusergo keep glibc's NSS
# (dlopen at run time, which a static binary cannot do) out of the net and
# os/user packages, so the binary needs no file of the image at run time.
FROM golang:${GO_VERSION}-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev libseccomp-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG COMMIT=unknown
# deploy/static_test.go runs this same command (read from this file) and
# checks that the result is static and that libseccomp works in it.
RUN CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -linkmode external -extldflags -static" -o /out/nodeshim ./cmd/nodeshim
# The reporter alone, pure Go: without the shim's code and client-go's
# clientset it is a third of nodeshim's size (BENCHMARKS.md, footprint).
RUN CGO_ENABLED=0 go build -trimpath -tags netgo,osusergo -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/nodeshim-reporter ./cmd/nodeshim-reporter

# Run: distroless static has no shell, no package manager and no libc;
# /etc/passwd names uid 65532 "nonroot", the reporter's uid.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nodeshim /usr/bin/nodeshim
COPY --from=build /out/nodeshim-reporter /usr/bin/nodeshim-reporter
ENTRYPOINT ["/usr/bin/nodeshim"]
