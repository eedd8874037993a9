//! Recorded streams, then synthetic ones for what the recordings lack, through [`ChatDecoder`].

use super::*;

#[test]
fn openai_parallel_tool_calls_become_two_complete_calls() {
    let (events, response) = replay("openai-chat.parallel-tool-calls.gpt-4o.sse");
    assert_eq!(
        events[0],
        ResponseEvent::Created {
            response_id: Some("chatcmpl-CMKAuuvC6E26nL6HLZzTrysEvC8Ln".to_owned()),
            model: Some("gpt-4o-2024-08-06".to_owned()),
        }
    );
    assert_eq!(response.status, ResponseStatus::Completed);
    // The opening chunk's `content: null` opens no message: the response is the two calls.
    assert_eq!(response.items.len(), 2);
    let calls: Vec<_> = response.function_calls().collect();
    assert_eq!(calls[0].call_id, "call_NS4iQj14cDFwc0BnrKqDHavt");
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(arguments(calls[0]), json!({"city": "Mexico City"}));
    assert_eq!(calls[1].call_id, "call_SkGkkGDvHQEEk0CGbnAh2AQw");
    assert_eq!(calls[1].name, "get_product_name");
    assert_eq!(arguments(calls[1]), json!({}));
    // Five argument fragments for the first call, one for the second.
    let deltas = |index| {
        events
            .iter()
            .filter(|event| {
                matches!(event, ResponseEvent::FunctionCallArgumentsDelta { output_index, .. } if *output_index == index)
            })
            .count()
    };
    assert_eq!((deltas(0), deltas(1)), (5, 1));
    assert_eq!(response.usage, Some(usage(417, 44, Some(0), Some(0))));
    assert_eq!(response.cost, None);
    assert_eq!(response.error, None);
    assert_eq!(finished(&events).len(), 1);
}

#[test]
fn openrouter_text_with_usage_and_cost() {
    let (events, response) = replay("openrouter-chat.text-usage-cost.claude-haiku-4.5.sse");
    assert_eq!(
        response.id.as_deref(),
        Some("gen-1780944361-X5HAtL0Z2NQp8nHAiT6F")
    );
    assert_eq!(
        response.model.as_deref(),
        Some("anthropic/claude-4.5-haiku-20251001")
    );
    assert_eq!(response.status, ResponseStatus::Completed);
    assert_eq!(response.text().as_deref(), Some("1\n2\n3"));
    assert_eq!(response.items.len(), 1);
    assert_eq!(
        response.items[0].id(),
        Some("msg_gen-1780944361-X5HAtL0Z2NQp8nHAiT6F")
    );
    assert_eq!(response.usage, Some(usage(15, 9, Some(0), Some(0))));
    assert_eq!(response.cost, Some(0.00006));
    // The usage chunk repeats `finish_reason: stop`: still one terminal event.
    assert_eq!(finished(&events).len(), 1);
}

#[test]
fn openrouter_reasoning_details_then_tool_call() {
    let (_, response) =
        replay("openrouter-chat.reasoning-details-then-tool-call.claude-haiku-4.5.sse");
    const THOUGHT: &str = "The user is asking for the weather in Berlin and specifically \
        requesting that I use the reasoning_weather tool. I have all the required parameters:\n\
        - city: \"Berlin\"\n\nLet me call the function with this parameter.";
    assert_eq!(response.status, ResponseStatus::Completed);
    assert_eq!(response.items.len(), 2);
    let thought = reasoning(&response.items[0]);
    assert_eq!(
        thought.content,
        Some(vec![json!({"type": "reasoning_text", "text": THOUGHT})])
    );
    // Fifteen `reasoning.text` fragments and the signature fragment merge into one entry.
    let details = &thought.extra["reasoning_details"];
    assert_eq!(details.as_array().map(Vec::len), Some(1));
    assert_eq!(details[0]["type"], "reasoning.text");
    assert_eq!(details[0]["text"], THOUGHT);
    assert_eq!(details[0]["format"], "anthropic-claude-v1");
    assert_eq!(details[0]["index"], 0);
    let signature = details[0]["signature"].as_str().unwrap();
    assert!(signature.starts_with("EvsCCkgIEBABGAIqQNe/") && signature.ends_with("RgB"));
    let call = response.items[1].as_function_call().unwrap();
    assert_eq!(call.call_id, "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7");
    assert_eq!(call.name, "reasoning_weather");
    assert_eq!(arguments(call), json!({"city": "Berlin"}));
    assert_eq!(response.usage, Some(usage(626, 106, Some(0), Some(54))));
    assert_eq!(response.cost, Some(0.001156));
}

#[test]
fn openrouter_mid_stream_error_fails_the_response() {
    let (events, response) = replay("openrouter-chat.mid-stream-error.minimax-m2.sse");
    assert!(events.contains(&ResponseEvent::Error {
        code: Some("400".to_owned()),
        message: "Token limit reached".to_owned(),
    }));
    assert_eq!(response.status, ResponseStatus::Failed);
    assert_eq!(response.error.as_deref(), Some("400: Token limit reached"));
    assert_eq!(response.incomplete_reason, None);
    // The reasoning was cut off by `finish_reason: length` and says so.
    assert_eq!(response.items.len(), 1);
    let thought = reasoning(&response.items[0]);
    const THOUGHT: &str = "We need to respond to a greeting. The user";
    assert_eq!(
        thought.content,
        Some(vec![json!({"type": "reasoning_text", "text": THOUGHT})])
    );
    assert_eq!(thought.extra["status"], "incomplete");
    assert_eq!(
        thought.extra["reasoning_details"],
        json!([{"type": "reasoning.text", "text": THOUGHT, "index": 0, "format": null}])
    );
    // The error chunk carries the usage: more reasoning tokens than completion tokens, as sent.
    assert_eq!(response.usage, Some(usage(43, 10, Some(0), Some(11))));
    assert_eq!(response.cost, Some(0.0));
    assert_eq!(finished(&events).len(), 1);
}

#[test]
fn openrouter_encrypted_reasoning_and_cached_tokens() {
    let (_, response) = replay("openrouter-chat.cached-tokens-cost.grok-4.sse");
    assert_eq!(response.status, ResponseStatus::Completed);
    assert_eq!(response.model.as_deref(), Some("x-ai/grok-4"));
    assert_eq!(response.items.len(), 2);
    // xAI reasons in private: one encrypted detail, no text.
    let thought = reasoning(&response.items[0]);
    assert_eq!(thought.content, None);
    let details = thought.extra["reasoning_details"].as_array().unwrap();
    assert_eq!(details.len(), 1);
    assert_eq!(details[0]["type"], "reasoning.encrypted");
    assert_eq!(
        details[0]["id"],
        "rs_619f3702-e30e-6ba5-7b57-466db8036365_us-east-1"
    );
    assert_eq!(details[0]["format"], "xai-responses-v1");
    assert!(
        details[0]["data"]
            .as_str()
            .unwrap()
            .starts_with("B7oH6rUO9kQM")
    );
    assert_eq!(
        response.text().as_deref(),
        Some(
            "I'm Grok, an AI built by xAI. I'm designed to be helpful, maximally truthful, and \
             a bit witty—think a mix of the Hitchhiker's Guide to the Galaxy and JARVIS from Iron \
             Man. My goal is to help you understand the universe (and maybe crack a few jokes \
             along the way). What's on your mind?"
        )
    );
    assert_eq!(response.usage, Some(usage(687, 187, Some(679), Some(118))));
    assert_eq!(response.cost, Some(0.00333825));
}

// ---- Synthetic streams for what the recordings lack. ----

#[test]
fn interleaved_parallel_calls_keep_their_arguments_apart() {
    let call = |index: u32, id: Option<&str>, name: Option<&str>, arguments: &str| {
        let mut function = json!({"arguments": arguments});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        let mut call = json!({"index": index, "function": function});
        if let Some(id) = id {
            call["id"] = json!(id);
        }
        chunk(json!({"tool_calls": [call]}), None)
    };
    let data = [
        chunk(json!({"content": "Checking."}), None),
        call(0, Some("call_a"), Some("lookup"), "{\"q\":"),
        call(1, Some("call_b"), Some("lookup"), "{\"q\":"),
        call(0, None, None, "\"x\"}"),
        call(1, None, None, "\"y\"}"),
        chunk(json!({}), Some("tool_calls")),
        "[DONE]".to_owned(),
    ];
    let response = fold(&decode_all(&data));
    assert_eq!(response.text().as_deref(), Some("Checking."));
    let calls: Vec<_> = response
        .function_calls()
        .map(|call| (call.call_id.as_str(), call.name.as_str(), arguments(call)))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_a", "lookup", json!({"q": "x"})),
            ("call_b", "lookup", json!({"q": "y"}))
        ]
    );
    assert_eq!(response.items[1].id(), Some("fc_call_a"));
}

#[test]
fn absent_cached_tokens_stay_absent() {
    let data = [
        chunk(json!({"content": "hi"}), Some("stop")),
        json!({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
            .to_string(),
        "[DONE]".to_owned(),
    ];
    let response = fold(&decode_all(&data));
    assert_eq!(response.usage, Some(usage(5, 1, None, None)));
    assert_eq!(response.cost, None);
}

#[test]
fn reasoning_content_then_text_are_two_items() {
    let data = [
        chunk(
            json!({"role": "assistant", "reasoning_content": "Think"}),
            None,
        ),
        chunk(json!({"reasoning_content": "ing."}), None),
        chunk(json!({"content": "Done."}), None),
        chunk(json!({}), Some("stop")),
        "[DONE]".to_owned(),
    ];
    let events = decode_all(&data);
    let response = fold(&events);
    assert_eq!(response.items.len(), 2);
    let thought = reasoning(&response.items[0]);
    assert_eq!(
        thought.content,
        Some(vec![json!({"type": "reasoning_text", "text": "Thinking."})])
    );
    assert!(!thought.extra.contains_key("reasoning_details"));
    assert_eq!(response.text().as_deref(), Some("Done."));
    assert_eq!(response.items[1].id(), Some("msg_chatcmpl-1_1"));
}

#[test]
fn finish_reason_without_done_finishes_at_the_end() {
    let events = decode_all(&[chunk(json!({"content": "hi"}), Some("stop"))]);
    assert_eq!(finished(&events).len(), 1);
    assert_eq!(fold(&events).text().as_deref(), Some("hi"));
}

#[test]
fn a_stream_without_finish_reason_or_done_is_truncated() {
    let events = decode_all(&[chunk(json!({"content": "hi"}), None)]);
    assert!(finished(&events).is_empty());
    let mut accumulator = ResponseAccumulator::new();
    for event in &events {
        accumulator.push(event);
    }
    assert!(accumulator.finish("test", 0).is_err());
}

#[test]
fn length_and_content_filter_are_incomplete() {
    for (reason, expected) in [
        ("length", "max_output_tokens"),
        ("content_filter", "content_filter"),
    ] {
        let data = [
            chunk(json!({"content": "cut"}), Some(reason)),
            "[DONE]".to_owned(),
        ];
        let response = fold(&decode_all(&data));
        assert_eq!(response.status, ResponseStatus::Incomplete);
        assert_eq!(response.incomplete_reason.as_deref(), Some(expected));
        let Item::Message(message) = &response.items[0] else {
            panic!("not a message: {:?}", response.items[0]);
        };
        assert_eq!(message.extra["status"], "incomplete");
    }
    let data = [chunk(json!({}), Some("error")), "[DONE]".to_owned()];
    assert_eq!(fold(&decode_all(&data)).status, ResponseStatus::Failed);
}

#[test]
fn one_terminal_event_and_nothing_after_done() {
    let data = [
        chunk(json!({"content": "a"}), Some("stop")),
        "[DONE]".to_owned(),
        chunk(json!({"content": "late"}), None),
        "[DONE]".to_owned(),
    ];
    let events = decode_all(&data);
    assert_eq!(finished(&events).len(), 1);
    assert_eq!(fold(&events).text().as_deref(), Some("a"));
}

#[test]
fn a_chunk_that_is_not_json_is_an_event_error() {
    let mut decoder = ChatDecoder::new();
    let error = decoder.decode("{\"id\": ", &mut Vec::new()).unwrap_err();
    assert_eq!(error.code(), "EVENT_MALFORMED");
    assert!(
        matches!(&error, ProviderError::Event { event_type, .. } if event_type == "chat.completion.chunk")
    );
}
