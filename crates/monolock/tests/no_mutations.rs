//! The simulation's planted mistakes (monolock-mutation) never reach the
//! shipped binary: not in this build of `monolock`, and not in any build of
//! the workspace, where Cargo unifies features over every package built
//! (monolock-server-mutants/Cargo.toml says how that is prevented).

use std::process::Command;

/// The mutation crate's name as it appears in symbols and debug info.
const MARK: &[u8] = b"monolock_mutation";

#[test]
fn the_monolock_binary_holds_no_mutation_symbol() {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_monolock")).expect("read the binary");
    assert!(
        !binary.windows(MARK.len()).any(|window| window == MARK),
        "the monolock binary links monolock_mutation"
    );
}

/// Feature resolution as `cargo build --workspace` does it: the only
/// packages that depend on monolock-mutation are the simulation's.
#[test]
fn in_a_workspace_build_only_the_simulation_depends_on_mutations() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--offline", "--locked", "--workspace"])
        .args(["--edges", "normal,build", "--invert", "monolock-mutation"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .expect("run cargo tree");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut dependents: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "monolock-mutation")
        .collect();
    dependents.sort_unstable();
    dependents.dedup();
    assert_eq!(
        dependents,
        [
            "monolock-client-mutants",
            "monolock-server-mutants",
            "monolock-sim"
        ],
        "{stdout}"
    );
}
