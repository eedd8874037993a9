//! Tool approval: the agent wants to send an email, a tool marked `needs_approval`; its call waits
//! while the person (here, this program) looks at exactly what would run, and approves it. The
//! model then answers from the tool's output.
//!
//! ```text
//! cargo run -p noetic-examples --example approval            # approves
//! cargo run -p noetic-examples --example approval -- reject  # rejects: the reason is the output
//! ```
//!
//! Runs offline against the demo model (a real provider works the same way).

use futures_util::StreamExt;
use noetic_core::{
    AgentHarness, ExecuteOptions, FrameworkEvent, Scope, SessionStatus, StreamEvent, Tool,
    ToolContext, ToolError, call_model,
};
use noetic_providers::DemoModel;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Email {
    /// What to say.
    body: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let reject = std::env::args().nth(1).as_deref() == Some("reject");
    let demo = DemoModel::start().await?;
    eprintln!("note: using the offline demo model at {}", demo.base_url());

    let send_email = Tool::new(
        "send_email",
        "Sends an email to the team",
        |email: Email, ctx: ToolContext| async move {
            // A real tool would pass the key to the mail service, so a retry sends once.
            Ok::<_, ToolError>(format!(
                "sent \"{}\" (idempotency key {})",
                email.body,
                ctx.idempotency_key()
            ))
        },
    )
    .needs_approval(true);
    let harness = AgentHarness::builder("assistant")
        .provider("demo", demo.provider()?)
        .agent_graph(call_model("assistant").model("demo").tool(send_email))
        .build()?;

    let thread = "team";
    let scope = Scope::thread(thread);
    let mut events = harness.events(scope.clone());
    harness
        .execute(
            "Tell the team the release is out",
            ExecuteOptions::new().thread_id(thread),
        )
        .await?;

    while let Some(event) = events.next().await {
        match &*event {
            StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
                approval_id,
                tool,
                arguments,
                ..
            }) => {
                println!("approval requested: {tool} {arguments}");
                if let SessionStatus::AwaitingApproval { calls, .. } = harness.status(scope.clone())
                {
                    println!("status: awaiting approval of {} call(s)", calls.len());
                }
                if reject {
                    harness
                        .reject(thread, approval_id, "the release is not announced yet")
                        .await?;
                    println!("rejected");
                } else {
                    harness.approve(thread, approval_id).await?;
                    println!("approved");
                }
            }
            StreamEvent::Framework(
                FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. },
            ) => break,
            _ => {}
        }
    }
    let response = harness.agent_response(scope).await?;
    println!("answer: {}", response.text);
    Ok(())
}
