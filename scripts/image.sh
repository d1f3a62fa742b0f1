#!/usr/bin/env bash
# Builds kubesync's container image as an OCI archive, without a daemon or a registry:
# a statically linked release binary and the public CA bundle, copied into an empty
# (`scratch`) image by buildah.
#
#   scripts/image.sh [OUTPUT]     default OUTPUT: target/kubesync-image.tar
#
# Load it with `podman load -i`, `skopeo copy oci-archive:... docker://...`, or
# `ctr image import`. The Dockerfile builds the same image where a daemon and the Rust image
# are available.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/kubesync-image.tar}"
target=x86_64-unknown-linux-gnu
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"

missing=()
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v file >/dev/null 2>&1 || missing+=(file)
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "image: installing ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "image: building a static kubesync $version (release, $target)" >&2
# crt-static links glibc statically; --target keeps build scripts and proc macros dynamic.
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --quiet --release --locked --target "$target" -p kubesync-cli --bin kubesync
bin="${CARGO_TARGET_DIR:-target}/$target/release/kubesync"
if ! file "$bin" | grep -Eq 'statically linked|static-pie linked'; then
  echo "image: $bin is not statically linked" >&2
  exit 1
fi

export STORAGE_DRIVER=vfs
ctr="$(buildah --storage-driver vfs from scratch)"
trap 'buildah --storage-driver vfs rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah --storage-driver vfs copy --chmod 0555 "$ctr" "$bin" /kubesync >/dev/null
# Public CAs, for remote clusters whose kubeconfig names no CA of its own (in-cluster access
# and kubeconfigs with certificate-authority-data need none).
buildah --storage-driver vfs copy --chmod 0444 "$ctr" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
# GLIBC_TUNABLES: glibc returns freed memory to the system (trim and mmap thresholds of
# 128 KiB), and its string functions are its AVX2 ones, not its AVX-512 ones: the AVX-512
# memcmp compares two empty strings (the core API group, a cluster-scoped object's namespace)
# by a masked load from a dangling address, 135 ns each on AMD EPYC instead of 1 ns (the
# book's Speed chapter, "Empty names and glibc's memcmp"). The binary's own code is unchanged.
buildah --storage-driver vfs config \
  --user 65532:65532 \
  --entrypoint '["/kubesync"]' \
  --cmd 'run' \
  --port 8080 \
  --env KUBESYNC_LOG_FORMAT=json \
  --env GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072:glibc.malloc.mmap_threshold=131072:glibc.cpu.hwcaps=-AVX512VL \
  --label org.opencontainers.image.title=kubesync \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.source=https://github.com/kubesync/kubesync \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  "$ctr"
mkdir -p "$(dirname "$out")"
rm -f "$out"
buildah --storage-driver vfs commit --quiet --format oci "$ctr" "oci-archive:$out:kubesync:$version" >/dev/null
echo "image: $out ($(du -h "$out" | cut -f1)), kubesync:$version" >&2
