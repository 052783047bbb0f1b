# syntax=docker/dockerfile:1
#
# nodeshim's image: two static binaries on a minimal base, run as the shim
# (`nodeshim serve`, as root in a privileged container) and as the reporter
# (`nodeshim-reporter`, its own small binary, as uid 65532) by
# deploy/daemonset.yaml, and CRIU for the shim's checkpoints. See
# docs/deploy.md.
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
# grpcnotrace keeps gRPC (the CRI client) from linking golang.org/x/net/trace,
# whose html/template pages make the linker keep every exported method of
# every type: the binary is 5 MB smaller without them (BENCHMARKS.md).
RUN CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo,grpcnotrace -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -linkmode external -extldflags -static" -o /out/nodeshim ./cmd/nodeshim
# The reporter alone, pure Go: without the shim's code and client-go's
# clientset it is a third of nodeshim's size (BENCHMARKS.md, footprint).
RUN CGO_ENABLED=0 go build -trimpath -tags netgo,osusergo,grpcnotrace -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/nodeshim-reporter ./cmd/nodeshim-reporter
# The RuntimeClass handler's OCI runtime and its restoring half, pure Go,
# which the DaemonSet's init container installs on the host
# (deploy/runtimeclass, docs/runtimeclass.md).
RUN CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-s -w" -o /out/nodeshim-runc ./cmd/nodeshim-runc
RUN CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-s -w" -o /out/nodeshim-runc-restore ./cmd/nodeshim-runc-restore

# CRIU: Debian trixie's criu 4.1.1 (bookworm's 3.17 fails `criu check` on
# kernels that map [vvar_vclock]) and the programs it runs: tar dumps and
# restores the content of a container's tmpfs mounts (such as /dev) and
# runs gzip through /bin/sh (dash). With their whole shared-library closure
# and glibc's loader, at Debian's own paths: the run stage has no libc of
# its own, and their ELF interpreter is /lib64/ld-linux-x86-64.so.2.
# criu.Find finds /usr/sbin/criu without configuration. deploy/image_test.go
# builds the test image from these same ARGs and checks that CRIU_LIBS is
# the programs' exact closure (sonames in /usr/lib/x86_64-linux-gnu).
FROM debian:trixie-slim AS criu
ARG CRIU_VERSION=4.1.1
ARG CRIU_PROGRAMS="/usr/sbin/criu /usr/bin/tar /usr/bin/gzip /bin/sh"
ARG CRIU_LIBS="libacl.so.1 libbsd.so.0 libc.so.6 libffi.so.8 libgmp.so.10 libgnutls.so.30 libhogweed.so.6 libidn2.so.0 libjansson.so.4 libmd.so.0 libmnl.so.0 libnet.so.1 libnettle.so.8 libnftables.so.1 libnftnl.so.11 libnl-3.so.200 libp11-kit.so.0 libpcre2-8.so.0 libprotobuf-c.so.1 libselinux.so.1 libtasn1.so.6 libunistring.so.5 libuuid.so.1 libxtables.so.12"
RUN apt-get update \
 && apt-get install -y --no-install-recommends criu tar gzip dash \
 && rm -rf /var/lib/apt/lists/* \
 && criu --version | grep -qx "Version: ${CRIU_VERSION}"
RUN mkdir -p /out/usr/sbin /out/usr/bin /out/bin /out/lib64 /out/usr/lib/x86_64-linux-gnu \
 && for p in ${CRIU_PROGRAMS}; do cp -L "$p" "/out$p" || exit 1; done \
 && cp -L /lib64/ld-linux-x86-64.so.2 /out/lib64/ld-linux-x86-64.so.2 \
 && for l in ${CRIU_LIBS}; do cp -L "/usr/lib/x86_64-linux-gnu/$l" "/out/usr/lib/x86_64-linux-gnu/$l" || exit 1; done \
 && chroot /out /usr/sbin/criu --version \
 && chroot /out /usr/bin/tar --create --gzip --directory /usr/sbin . >/dev/null

# Run: distroless static has no package manager, and here no libc but the
# criu stage's (for CRIU and the programs it runs) and no shell but the
# /bin/sh that tar needs; /etc/passwd names uid 65532 "nonroot", the
# reporter's uid.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nodeshim /usr/bin/nodeshim
COPY --from=build /out/nodeshim-reporter /usr/bin/nodeshim-reporter
COPY --from=build /out/nodeshim-runc /out/nodeshim-runc-restore /usr/bin/
COPY --from=criu /out/ /
ENTRYPOINT ["/usr/bin/nodeshim"]
