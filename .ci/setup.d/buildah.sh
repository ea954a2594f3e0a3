# The container image test (crates/monolock/tests/container_image.rs):
# buildah builds deploy/Dockerfile offline (FROM scratch needs no registry).
need_apt buildah
