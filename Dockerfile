# Build: docker build -t hossted-operator .
# A static (musl) release binary in a distroless, non-root image.
FROM rust:1.95-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl && apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin hossted-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/hossted-operator /hossted-operator
USER 65532:65532
ENTRYPOINT ["/hossted-operator"]
