#!/usr/bin/env bash
# Proves the image needs nothing but itself: unpacks the OCI archive's layers into an empty
# directory and runs kubesync inside it with chroot, as the image's non-root user.
#
#   scripts/image-test.sh [ARCHIVE]     default: target/kubesync-image.tar (make image)
set -euo pipefail
cd "$(dirname "$0")/.."
archive="${1:-target/kubesync-image.tar}"
if ! command -v openssl >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
check() { # check NAME COMMAND...: runs the command, counts and reports the result
  local name="$1"
  shift
  if "$@"; then
    passed=$((passed + 1))
    echo "image-test: ok: $name"
  else
    failed=$((failed + 1))
    echo "image-test: FAILED: $name"
  fi
}

mkdir -p "$work/oci" "$work/rootfs"
tar -xf "$archive" -C "$work/oci"
# index.json -> manifest -> config and layers (each a blob named by its digest).
read -r config layers < <(python3 - "$work/oci" <<'PY'
import json, sys, os
root = sys.argv[1]
blob = lambda d: os.path.join(root, "blobs", *d.split(":", 1))
index = json.load(open(os.path.join(root, "index.json")))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
print(blob(manifest["config"]["digest"]), ",".join(blob(l["digest"]) for l in manifest["layers"]))
PY
)
IFS=, read -r -a layer_files <<<"$layers"
for layer in "${layer_files[@]}"; do
  tar -xf "$layer" -C "$work/rootfs"
done

files="$(cd "$work/rootfs" && find . -mindepth 1 | sort | tr '\n' ' ')"
check "the image holds only the binary and the CA bundle (found: $files)" \
  test "$files" = "./etc ./etc/ssl ./etc/ssl/certs ./etc/ssl/certs/ca-certificates.crt ./kubesync "
user="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"].get("User",""))' "$config")"
entrypoint="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"].get("Entrypoint"))' "$config")"
check "runs as a non-root user (User: $user)" test "$user" = "65532:65532"
check "the binary is the entrypoint ($entrypoint)" test "$entrypoint" = "['/kubesync']"
tunables="$(python3 -c 'import json,sys; print(" ".join(e for e in json.load(open(sys.argv[1]))["config"].get("Env", []) if e.startswith("GLIBC_TUNABLES=")))' "$config")"
check "glibc returns freed memory to the system ($tunables)" \
  grep -q '^GLIBC_TUNABLES=.*glibc.malloc.trim_threshold=131072' <<<"$tunables"
check "glibc's string functions are its AVX2 ones ($tunables)" \
  grep -q '^GLIBC_TUNABLES=.*glibc.cpu.hwcaps=-AVX512VL' <<<"$tunables"

as_user=(chroot --userspec=65532:65532 "$work/rootfs" /kubesync)
version_out="$(env "$tunables" "${as_user[@]}" --version 2>&1 || true)"
check "kubesync --version in the empty root ($version_out)" grep -q '^kubesync [0-9]' <<<"$version_out"
"${as_user[@]}" crds >"$work/crds.yaml" 2>"$work/crds.err" || true
check "kubesync crds in the empty root equals config/crd/bases/kubesync.io.yaml" \
  cmp -s "$work/crds.yaml" config/crd/bases/kubesync.io.yaml
# The TLS stack works in the empty root: a kubeconfig with its own CA reaches the point of
# connecting (nothing listens on port 1), instead of failing to set up TLS.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/ca.key" -out "$work/ca.crt" -days 1 \
  -subj /CN=image-test >/dev/null 2>&1
cat >"$work/rootfs/kubeconfig" <<KC
apiVersion: v1
kind: Config
current-context: t
clusters: [{name: t, cluster: {server: "https://127.0.0.1:1", certificate-authority-data: "$(base64 -w0 "$work/ca.crt")"}}]
users: [{name: t, user: {token: t}}]
contexts: [{name: t, context: {cluster: t, user: t}}]
KC
check_out="$("${as_user[@]}" check --kubeconfig /kubeconfig --timeout 2 2>&1 || true)"
check "kubesync check sets up TLS in the empty root ($check_out)" grep -q 'client error (Connect)' <<<"$check_out"
echo "image-test: $passed passed, $failed failed"
test "$failed" -eq 0
