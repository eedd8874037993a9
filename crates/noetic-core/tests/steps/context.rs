//! Contexts: abort cascades down only, and the first abort reason wins.

use noetic_core::{AgentHarness, Context, ContextOptions};

use crate::support::{cancelled_reason, harness, root};

fn child_of(harness: &AgentHarness, parent: &Context) -> Context {
    harness.create_context(ContextOptions::new().parent(parent))
}

#[tokio::test]
async fn abort_cascades_to_descendants_but_never_up_or_sideways() {
    let harness = harness();
    let parent = root(&harness);
    let child = child_of(&harness, &parent);
    let sibling = child_of(&harness, &parent);
    let grandchild = child_of(&harness, &child);
    assert_eq!(grandchild.depth(), 2);

    child.abort(Some("child stop".to_owned()));

    assert!(child.aborted());
    assert!(grandchild.aborted());
    assert!(!parent.aborted(), "never up");
    assert!(!sibling.aborted(), "never sideways");
    grandchild.cancelled().await;

    parent.abort(None);
    assert!(sibling.aborted());
}

#[test]
fn the_first_abort_reason_wins() {
    let harness = harness();
    let ctx = root(&harness);

    ctx.abort(Some("first".to_owned()));
    ctx.abort(Some("second".to_owned()));

    assert_eq!(ctx.abort_reason().as_deref(), Some("first"));
    assert_eq!(
        cancelled_reason(ctx.check_aborted().unwrap_err()).as_deref(),
        Some("first")
    );
}

#[test]
fn a_child_inherits_the_abort_reason_of_its_parent() {
    let harness = harness();
    let parent = root(&harness);
    let child = child_of(&harness, &parent);
    let grandchild = child_of(&harness, &child);

    parent.abort(Some("parent stop".to_owned()));

    assert_eq!(child.abort_reason().as_deref(), Some("parent stop"));
    assert_eq!(grandchild.abort_reason().as_deref(), Some("parent stop"));
    let late = child_of(&harness, &parent);
    assert!(
        late.aborted(),
        "a child created after the abort starts aborted"
    );
    assert_eq!(late.abort_reason().as_deref(), Some("parent stop"));
}

#[test]
fn a_later_abort_of_an_already_cancelled_child_keeps_the_first_reason() {
    let harness = harness();
    let parent = root(&harness);
    let child = child_of(&harness, &parent);

    parent.abort(Some("parent stop".to_owned()));
    child.abort(Some("too late".to_owned()));

    assert_eq!(child.abort_reason().as_deref(), Some("parent stop"));
}

#[test]
fn a_child_aborted_first_keeps_its_own_reason() {
    let harness = harness();
    let parent = root(&harness);
    let child = child_of(&harness, &parent);

    child.abort(Some("child stop".to_owned()));
    parent.abort(Some("parent stop".to_owned()));

    assert_eq!(child.abort_reason().as_deref(), Some("child stop"));
    assert_eq!(parent.abort_reason().as_deref(), Some("parent stop"));
}
