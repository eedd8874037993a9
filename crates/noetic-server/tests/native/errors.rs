//! The refusals: 401 without the token, 403 for a foreign Host or Origin, 404, 409, 413, 429 —
//! each a JSON error with a stable code, and nothing accepted.

use noetic_server::{ServeConfig, Token};
use noetic_test_support::{PacedModel, ScriptedModel, ScriptedResponse};
use serde_json::json;

use crate::support::{Served, bounded, harness, status_and_json};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

#[tokio::test(flavor = "multi_thread")]
async fn a_server_with_a_token_answers_401_without_it_and_serves_with_it() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let config = ServeConfig::new().token(Token::new(TOKEN).unwrap());
    let served = Served::start(harness(model, vec![]), config).await;
    let (status, body) = served.get("/v1/threads").await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "SERVER_UNAUTHORIZED");
    assert!(!body.to_string().contains(TOKEN));
    let wrong = served
        .client
        .get(served.url("/v1/threads"))
        .bearer_auth("0123456789abcdef0123456789abcdeX")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let right = served
        .client
        .get(served.url("/v1/threads"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);
    // EventSource cannot set headers: the query parameter works for the stream.
    let stream = served
        .client
        .get(served.url(&format!("/v1/threads/x/events?token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        stream.status(),
        404,
        "authorized, and the thread is unknown"
    );
    // Health and the page need no token (the page holds no data).
    assert_eq!(served.get("/v1/health").await.0, 200);
    assert_eq!(
        served
            .client
            .get(served.url("/"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // The token never shows in the server's Debug.
    assert!(!format!("{:?}", served.server).contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_host_or_origin_is_403_and_an_allowed_origin_gets_cors() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let config = ServeConfig::new().allow_origin("https://app.example.com");
    let served = Served::start(harness(model, vec![]), config).await;
    let rebinding = served
        .client
        .get(served.url("/v1/threads"))
        .header("host", "attacker.example:80")
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(rebinding).await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["code"], "SERVER_HOST_FORBIDDEN");

    let foreign = served
        .client
        .post(served.url("/v1/threads/f/messages"))
        .header("origin", "https://evil.example")
        .json(&json!({"input": "run rm -rf"}))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(foreign).await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["code"], "SERVER_ORIGIN_FORBIDDEN");
    assert_eq!(
        served.get("/v1/threads").await.1["threads"],
        json!([]),
        "nothing accepted"
    );

    let allowed = served
        .client
        .get(served.url("/v1/threads"))
        .header("origin", "https://app.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status(), 200);
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    // The server's own origin (the page) is always allowed.
    let own = served
        .client
        .get(served.url("/v1/threads"))
        .header("origin", served.base.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_threads_routes_and_approvals_are_404_and_an_idle_abort_is_409() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let served = Served::start(harness(model, vec![]), ServeConfig::new()).await;
    for path in ["/v1/threads/nope", "/v1/threads/nope/items", "/v1/nothing"] {
        let (status, body) = served.get(path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["code"], "SERVER_NOT_FOUND");
    }
    served
        .post("/v1/threads", json!({"thread_id": "idle"}))
        .await;
    let (status, body) = served
        .post(
            "/v1/threads/idle/approvals/none",
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "APPROVAL_NOT_FOUND");
    let (status, body) = served.post("/v1/threads/idle/abort", json!({})).await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "SERVER_NOT_RUNNING");
    let (status, body) = served
        .post(
            "/v1/threads/idle/messages",
            json!({"input": "x", "bogus": 1}),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "SERVER_BAD_REQUEST");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("bogus"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_and_messages_over_their_limits_are_413() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let config = ServeConfig::new()
        .max_body_bytes(4096)
        .max_message_bytes(100);
    let served = Served::start(harness(model.clone(), vec![]), config).await;
    let (status, body) = served
        .post(
            "/v1/threads/big/messages",
            json!({"input": "x".repeat(8000)}),
        )
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "SERVER_BODY_TOO_LARGE");
    let (status, body) = served
        .post(
            "/v1/threads/big/messages",
            json!({"input": "y".repeat(200)}),
        )
        .await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over the limit of 100")
    );
    assert_eq!(model.request_count(), 0, "nothing ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_queue_is_429_and_takes_messages_again_once_turns_took_them() {
    let model = PacedModel::new();
    let served = Served::start(
        harness(model.clone(), vec![]),
        ServeConfig::new().max_queue(1),
    )
    .await;
    served.post("/v1/threads", json!({"thread_id": "q"})).await;
    let mut events = served.events("q", "?replay=none", None).await;
    let (first, _) = served
        .post("/v1/threads/q/messages", json!({"input": "1"}))
        .await;
    assert_eq!(first, 202);
    let call = bounded("turn 1's call", model.next_call()).await;
    let (second, body) = served
        .post("/v1/threads/q/messages", json!({"input": "2"}))
        .await;
    assert_eq!(second, 202, "{body}");
    assert_eq!(body["queued"], true);
    let (third, body) = served
        .post(
            "/v1/threads/q/messages",
            json!({"input": "3", "message_id": "m3"}),
        )
        .await;
    assert_eq!(third, 429, "{body}");
    assert_eq!(body["error"]["code"], "SERVER_QUEUE_FULL");
    call.send_all(ScriptedResponse::text("one").into_events());
    drop(call);
    let call = bounded("turn 2's call", model.next_call()).await;
    call.send_all(ScriptedResponse::text("two").into_events());
    drop(call);
    events.until(":turn_completed").await;
    events.until(":turn_completed").await;
    // The refused id was not remembered: the same message is taken now.
    let (retry, body) = served
        .post(
            "/v1/threads/q/messages",
            json!({"input": "3", "message_id": "m3"}),
        )
        .await;
    assert_eq!(retry, 202, "{body}");
}
