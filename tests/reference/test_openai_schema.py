"""The OpenAI request schema on its own (the HTTP tests cover the status codes and error bodies)."""

import pytest

from dflashbench.reference.serving.openai_schema import RequestError, parse_chat, parse_completion


def test_a_completion_body_becomes_one_request_with_openai_defaults():
    req = parse_completion({"prompt": [[3, 4]], "stop": "x", "stream": True, "stream_options": {"include_usage": True},
                            "top_k": -1, "n": None, "unknown_key": 1})
    assert req.prompt == (3, 4)  # a batch of one token-id prompt
    s = req.sampling
    assert (s.max_tokens, s.temperature, s.stop, s.stream, s.include_usage) == (16, 1.0, ("x",), True, True)


def test_a_chat_body_joins_text_parts_and_prefers_max_completion_tokens():
    req = parse_chat({"messages": [{"role": "assistant", "content": None},
                                   {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                      "max_tokens": 5, "max_completion_tokens": 7, "add_generation_prompt": None})
    assert req.messages == ({"role": "assistant", "content": ""}, {"role": "user", "content": "ab"})
    assert req.sampling.max_tokens == 7 and req.add_generation_prompt is True


@pytest.mark.parametrize(("body", "param", "message"), [
    ({"prompt": "x", "temperature": True}, "temperature", "'temperature' must be a number, got boolean"),
    ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop", "'stop' takes at most 4 sequences, got 5"),
    ({"prompt": "x", "stop": [""]}, "stop", "'stop' sequences must not be empty"),
    ({"prompt": "x", "stop_token_ids": [1, -1]}, "stop_token_ids", "array of token ids (non-negative integers)"),
    ({"prompt": "x", "stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage",
     "'stream_options.include_usage' must be a boolean, got number"),
    ({"prompt": "", "max_tokens": 3}, "prompt", "'prompt' must not be empty"),
    ({"prompt": [], "max_tokens": 3}, "prompt", "non-empty array of token ids"),
])
def test_completion_errors_name_the_parameter(body, param, message):
    with pytest.raises(RequestError) as err:
        parse_completion(body)
    assert err.value.param == param and message in err.value.message and err.value.status == 400


@pytest.mark.parametrize(("message", "param", "needle"), [
    ("hi", "messages[0]", "must be an object with 'role' and 'content'"),
    ({"role": "user", "content": [{"type": "image_url"}]}, "messages[0].content", "text-only"),
    ({"role": "user", "content": 5}, "messages[0].content", "must be a string, got number"),
])
def test_chat_message_errors_name_the_message(message, param, needle):
    with pytest.raises(RequestError) as err:
        parse_chat({"messages": [message]})
    assert err.value.param == param and needle in err.value.message
