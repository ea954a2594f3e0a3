//! The vectors exported from the model's counterexamples
//! (clients/conformance/vectors/v*-model-*.json) are what the export
//! writes today: a change to the model or to the export that changes them
//! shows here, and the committed files are regenerated with the command
//! in the vectors' README.

use monolock_model::{Params, Variant, export_vector};

fn committed(name: &str) -> String {
    let path = format!(
        "{}/../../clients/conformance/vectors/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
}

fn exports_as_committed(params: Params) {
    let (name, text) = export_vector(&params, 2000).expect("a vector");
    assert_eq!(
        text,
        committed(&name),
        "{name} differs from the committed file"
    );
}

#[test]
fn the_v2_counterexamples_export_as_committed() {
    for variant in [Variant::GrantedConfirmsPing, Variant::GrantedAfterRelease] {
        exports_as_committed(Params {
            variant,
            ..Params::sessions()
        });
    }
}

#[test]
fn the_deadline_from_receive_counterexample_exports_as_committed() {
    // `monolock-model --mistake DeadlineFromReceive --lease 8 --horizon 8
    // --pauses 1 --stalls 1 --acquires 1`
    exports_as_committed(Params {
        lease: 8,
        second: 8,
        horizon: 8,
        pauses: 1,
        stalls: 1,
        acquires: 1,
        variant: Variant::DeadlineFromReceive,
        ..Params::small()
    });
}

#[test]
fn a_server_mistake_is_not_exported() {
    let err = export_vector(
        &Params {
            variant: Variant::PromoteExpiredWaiter,
            ..Params::small()
        },
        2000,
    )
    .expect_err("not a client's mistake");
    assert!(err.contains("not a client's mistake"), "{err}");
}

#[test]
fn a_vector_lease_outside_the_protocols_bounds_is_refused() {
    let params = Params {
        variant: Variant::GrantedConfirmsPing,
        ..Params::sessions()
    };
    for lease_ms in [0, 40, 3_600_020] {
        let err = export_vector(&params, lease_ms).expect_err("refused");
        assert!(err.contains("must be 100 ms to 1 h"), "{lease_ms}: {err}");
    }
}
