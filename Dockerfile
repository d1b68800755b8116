# Build: docker build -t hossted-operator .
#
# The glibc release binary — the build every figure in bench/REPORT.md was
# measured on (src/memory.rs tunes glibc's allocator; musl's behaves very
# differently under this workload) — on distroless `cc`, which carries
# glibc and libgcc and nothing else, non-root. Beside it, `helm` for
# delivery, built from the Go module proxy at the version the tests run
# (HELM_VERSION in hack/envtest.env).
#
# hack/build-image-rootfs.sh runs these same build steps without Docker and
# checks the result (hack/test.sh runs it): keep the two in step.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin hossted-operator

FROM golang:1.26-bookworm AS helm
WORKDIR /src
COPY hack/envtest.env hack/envtest.env
RUN . hack/envtest.env && CGO_ENABLED=0 GOBIN=/out go install -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v${HELM_VERSION}" \
      "helm.sh/helm/v4/cmd/helm@v${HELM_VERSION}"

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/hossted-operator /hossted-operator
COPY --from=helm /out/helm /usr/local/bin/helm
USER 65532:65532
ENTRYPOINT ["/hossted-operator"]
