# kubesync's image, for builders with a Docker daemon. `make image` builds the same image with
# buildah and no daemon (scripts/image.sh).
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
# A static binary (glibc, crt-static): the final image holds nothing else but the CA bundle.
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target x86_64-unknown-linux-gnu -p kubesync-cli --bin kubesync \
 && cp target/x86_64-unknown-linux-gnu/release/kubesync /kubesync

FROM scratch
COPY --from=build --chmod=0555 /kubesync /kubesync
COPY --from=build --chmod=0444 /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65532:65532
EXPOSE 8080
ENV KUBESYNC_LOG_FORMAT=json
ENTRYPOINT ["/kubesync"]
CMD ["run"]
