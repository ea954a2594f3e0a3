//! The shared protocol vectors (clients/conformance/vectors) catch every
//! client mistake the simulation plants: with none switched on, the client
//! passes every vector; with one switched on, it fails the vectors that pin
//! the rule it breaks, the model's exported counterexamples among them.

use monolock_client_mutants::vectors::{directory, replay_all};
use monolock_mutation::{Mutation, set};

/// The names of the vectors the client fails with `mistakes` switched on.
fn failing(mistakes: &[Mutation]) -> Vec<String> {
    set(mistakes);
    let failures = replay_all(&directory(env!("CARGO_MANIFEST_DIR")));
    set(&[]);
    let failures = failures.expect("the vectors directory reads");
    failures.into_iter().map(|(name, _)| name).collect()
}

#[test]
fn without_a_mistake_the_client_passes_every_vector() {
    assert_eq!(failing(&[]), Vec::<String>::new());
}

#[test]
fn each_client_mistake_fails_the_vectors_that_pin_it() {
    let pinned: [(Mutation, &[&str]); 5] = [
        (
            Mutation::PushConfirmsHeartbeat,
            &[
                "v1-model-push-confirms-heartbeat",
                "v1-push-confirms-nothing",
                "v1-waiting-then-pushed-grant",
                "v2-model-granted-confirms-ping",
                "v2-push-confirms-nothing",
            ],
        ),
        (
            Mutation::DeadlineFromReceive,
            &[
                "v1-model-deadline-from-receive",
                "v1-deadline-from-send",
                "v2-deadline-exact",
            ],
        ),
        (
            Mutation::V2GrantedConfirmsSession,
            &[
                "v2-model-granted-confirms-ping",
                "v2-granted-confirms-nothing",
                "v2-push-confirms-nothing",
            ],
        ),
        (
            Mutation::V2BeliefPastDeadline,
            &["v2-deadline-exact", "v2-push-confirms-nothing"],
        ),
        (
            Mutation::V2BeliefUntilReleased,
            &["v2-released", "v2-revoked-one-claim"],
        ),
    ];
    for (mistake, vectors) in pinned {
        let failing = failing(&[mistake]);
        for vector in vectors {
            assert!(
                failing.iter().any(|name| name == vector),
                "with {} the client still passes {vector} (it fails {failing:?})",
                mistake.as_str()
            );
        }
    }
}
