//! Scenario 37, the channel part: a parent's abort rejects a child's pending `recv` with `CANCELLED`
//! (with the parent's reason); a child's abort reaches neither its parent's nor its siblings' waiters.

use noetic_core::channel::Channel;
use noetic_core::{Context, Error, run_code, spawn};

use crate::support::{assert_pending, child, harness, ready, root};

#[tokio::test]
async fn a_parent_abort_rejects_a_childs_pending_recv() {
    let harness = harness();
    let parent = root(&harness);
    let worker = child(&parent);
    let grandchild = child(&worker);
    let jobs = Channel::<u32>::queue("jobs", 4);

    let mut waiting = Box::pin(worker.recv(&jobs, None));
    let mut deeper = Box::pin(grandchild.recv(&jobs, None));
    assert_pending(&mut waiting, "child receiver").await;
    assert_pending(&mut deeper, "grandchild receiver").await;

    parent.abort(Some("user pressed stop".to_owned()));

    for (name, future) in [("child", &mut waiting), ("grandchild", &mut deeper)] {
        let error = ready(future, name).await.unwrap_err();
        assert!(
            matches!(&error, Error::Cancelled { reason: Some(reason) } if reason == "user pressed stop"),
            "{name}: {error:?}"
        );
    }
}

#[tokio::test]
async fn a_child_abort_reaches_neither_parent_nor_sibling_waiters() {
    let harness = harness();
    let parent = root(&harness);
    let (aborted, sibling) = (child(&parent), child(&parent));
    let jobs = Channel::<u32>::queue("jobs", 4);

    let mut parent_waiting = Box::pin(parent.recv(&jobs, None));
    let mut sibling_waiting = Box::pin(sibling.recv(&jobs, None));
    let mut aborted_waiting = Box::pin(aborted.recv(&jobs, None));
    assert_pending(&mut parent_waiting, "parent receiver").await;
    assert_pending(&mut sibling_waiting, "sibling receiver").await;
    assert_pending(&mut aborted_waiting, "receiver to abort").await;

    aborted.abort(None);
    assert!(
        ready(&mut aborted_waiting, "aborted receiver")
            .await
            .unwrap_err()
            .is_cancelled()
    );
    assert_pending(&mut parent_waiting, "parent receiver").await;
    assert_pending(&mut sibling_waiting, "sibling receiver").await;

    parent.send(&jobs, 1).await.unwrap();
    parent.send(&jobs, 2).await.unwrap();
    assert_eq!(ready(&mut parent_waiting, "parent").await.unwrap(), 1);
    assert_eq!(ready(&mut sibling_waiting, "sibling").await.unwrap(), 2);
}

#[tokio::test]
async fn aborting_the_root_cancels_a_spawned_steps_blocked_recv() {
    let harness = harness();
    let ctx = root(&harness);
    let ready_signal = Channel::<bool>::value("ready");
    let jobs = Channel::<u32>::queue("jobs", 4);

    let worker = spawn(
        "worker",
        run_code("wait-for-job", {
            let (ready_signal, jobs) = (ready_signal.clone(), jobs.clone());
            move |(): (), ctx: Context| {
                let (ready_signal, jobs) = (ready_signal.clone(), jobs.clone());
                async move {
                    ctx.send(&ready_signal, true).await?;
                    ctx.recv(&jobs, None).await
                }
            }
        }),
    )
    .build();

    let host = async {
        // The worker announces itself and blocks on `jobs` in the same poll.
        assert!(ctx.recv(&ready_signal, None).await.unwrap());
        ctx.abort(Some("host shutdown".to_owned()));
    };
    let (outcome, ()) = tokio::join!(harness.run(&worker, (), &ctx), host);
    let error = outcome.unwrap_err();
    assert!(error.is_cancelled(), "{error:?}");
    assert_eq!(ctx.abort_reason().as_deref(), Some("host shutdown"));
}
