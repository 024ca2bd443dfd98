# Shell functions shared by the image builds for hosts without a registry
# (scripts/ci_docker.sh: the CPU image; scripts/build_cuda_local.sh: the CUDA image).
# Sourced from the repository root after `set -euo pipefail`; defines functions only.
# The caller sets IMAGES_LIB_NAME (its name, printed before each step).

# step WORDS... then done_step: print a step's name, then how long it took.
step_t0=0
step() { step_t0=$(date +%s); echo "== ${IMAGES_LIB_NAME:-images}: $*"; }
done_step() { echo "   done in $(( $(date +%s) - step_t0 )) s"; }

# unmount_rootfs DIR: undo the mounts debootstrap leaves inside DIR (do it before removing DIR).
unmount_rootfs() {
    local m
    for m in proc sys dev/pts; do umount -l "$1/$m" 2>/dev/null || true; done
}

# import_rootfs DIR TAG: the debootstrap'd DIR, without apt's downloads and lists, as image TAG.
import_rootfs() {
    rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*
    tar -C "$1" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
        - "$2" >/dev/null
}

# image_inputs BASE FILE...: sha256 (hex) of FILE..., the lab's sources and the id of image BASE;
# stored as the image's iteralab.inputs label, so an unchanged image is not rebuilt.
image_inputs() {
    local base=$1; shift
    { cat "$@"; find lab -name '*.py' -o -name '*.csv' -o -name '*.toml' | LC_ALL=C sort | xargs cat;
      docker image inspect "$base" --format '{{.Id}}'; } | sha256sum | cut -c1-64
}

# image_is_current IMAGE INPUTS: true when IMAGE exists with iteralab.inputs = INPUTS.
image_is_current() {
    [[ "$(docker image inspect "$1" --format '{{index .Config.Labels "iteralab.inputs"}}' 2>/dev/null || true)" == "$2" ]]
}

# wheelhouse_summary DIR: print how many wheels DIR holds and their size.
wheelhouse_summary() { echo "   $(ls "$1"/*.whl | wc -l) wheels, $(du -sh "$1" | cut -f1)"; }

# quiet_build ARGS...: `docker build --network host -q ARGS... -` on the tar context read from
# stdin, labelled with the lab sources' sha256 (the launcher refuses an image of other sources);
# the classic builder's deprecation notices are dropped from stderr.
quiet_build() {
    docker build --network host -q --label iteralab.lab-sha256="$(python3 -m lab.facts.files)" "$@" - >/dev/null \
        2> >(grep -v -e "legacy builder is deprecated" -e "BuildKit is currently disabled" \
                     -e "environment-variable" -e '^$' >&2)
}
