//! `sequence`: outputs chain through steps of different types.

use noetic_core::{Context, run_code, sequence};

use crate::support::{Never, harness, root};

#[tokio::test]
async fn outputs_chain_through_steps_of_different_types() {
    let harness = harness();
    let step = sequence("describe-length")
        .step(run_code(
            "length",
            |text: String, _ctx: Context| async move { Ok::<_, Never>(text.chars().count()) },
        ))
        .step(run_code("is-even", |n: usize, _ctx: Context| async move {
            Ok::<_, Never>(n.is_multiple_of(2))
        }))
        .step(run_code(
            "describe",
            |even: bool, _ctx: Context| async move {
                Ok::<_, Never>(if even { "even" } else { "odd" }.to_owned())
            },
        ))
        .build();
    let ctx = root(&harness);

    assert_eq!(
        harness.run(&step, "hello".to_owned(), &ctx).await.unwrap(),
        "odd"
    );
    assert_eq!(
        harness.run(&step, "hi".to_owned(), &ctx).await.unwrap(),
        "even"
    );
}

#[tokio::test]
async fn a_failing_step_stops_the_sequence() {
    let harness = harness();
    let calls = crate::support::counter();
    let step = sequence("stops")
        .step(crate::support::failing("fails"))
        .step(crate::support::counting_inc("after", &calls))
        .build();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    let (step_id, _) = crate::support::step_failure(error);
    assert_eq!(step_id, "fails");
    assert_eq!(crate::support::count(&calls), 0);
}
