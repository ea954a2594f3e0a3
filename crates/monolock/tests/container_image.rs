//! deploy/Dockerfile builds offline into a FROM scratch image with the
//! properties docs/ha.md states, using buildah from Debian's packages (CI
//! installs it: .ci/setup.d/buildah.sh). The binary packaged here is the
//! test's own build (the static release build is what operators package;
//! the Dockerfile is the same).

use std::{path::Path, process::Command};

use serde_json::Value;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");

fn buildah(args: &[&str]) -> std::process::Output {
    Command::new("buildah")
        .args(["--storage-driver", "vfs"])
        .args(args)
        .output()
        .expect("run buildah")
}

/// Why the image cannot be built here, or `None`.
fn unavailable() -> Option<String> {
    let root = monolock_testkit::sys::is_root();
    let has_buildah = Command::new("buildah").arg("--version").output().is_ok();
    match (root, has_buildah) {
        (true, true) => None,
        (false, _) => Some("building the image needs root (CI runs as root)".to_owned()),
        (_, false) => Some("building the image needs buildah (Debian: buildah)".to_owned()),
    }
}

#[test]
fn the_dockerfile_builds_offline_into_a_scratch_image() {
    if let Some(why) = unavailable() {
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let context = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        env!("CARGO_BIN_EXE_monolock"),
        context.path().join("monolock"),
    )
    .expect("copy the binary");
    let tag = format!("localhost/monolock-test:{}", std::process::id());
    let dockerfile = Path::new(DEPLOY).join("Dockerfile");
    let built = buildah(&[
        "bud",
        "--isolation",
        "chroot",
        "--pull-never",
        "--build-arg",
        "BINARY=monolock",
        "-f",
        dockerfile.to_str().expect("path"),
        "-t",
        &tag,
        context.path().to_str().expect("path"),
    ]);
    assert!(
        built.status.success(),
        "buildah bud: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let inspected = buildah(&["inspect", "--type", "image", &tag]);
    let _ = buildah(&["rmi", &tag]);
    assert!(inspected.status.success());
    let image: Value = serde_json::from_slice(&inspected.stdout).expect("inspect JSON");
    let config = &image["OCIv1"]["config"];
    assert_eq!(config["User"], "65532:65532", "{config}");
    assert!(config["ExposedPorts"]["7070/tcp"].is_object(), "{config}");
    assert!(config["ExposedPorts"]["9090/tcp"].is_object(), "{config}");
    let env: Vec<&str> = config["Env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        env.contains(&"MONOLOCK_LISTEN_ADDRESS=0.0.0.0:7070"),
        "{env:?}"
    );
    assert_eq!(config["Entrypoint"][0], "/monolock");
    assert!(
        image["Docker"]["config"]["Healthcheck"].is_null(),
        "no HEALTHCHECK"
    );
    // FROM scratch: one layer, the binary's.
    let layers = image["OCIv1"]["rootfs"]["diff_ids"]
        .as_array()
        .expect("layers");
    assert_eq!(layers.len(), 1, "{layers:?}");
}
