# Sourced by the image tests: sets podman_cmd to podman with its own runtime where that can start a
# container here, else with runc without rlimits (tests/images/oci-runtime-without-rlimits), and
# says so. Needs $root (the checkout) and the cartd image.
podman_cmd=(podman)
if ! podman run --rm --network host localhost/cart-lab/cartd:latest --version >/dev/null 2>&1; then
  podman_cmd=(podman --runtime "$root/tests/images/oci-runtime-without-rlimits")
  echo "note: podman's runtime cannot start a container here; using runc without rlimits"
fi
