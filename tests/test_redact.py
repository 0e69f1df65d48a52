"""The one redaction function: what it replaces in text, argv lists and dicts, and what it leaves alone."""

import pytest

from dflashbench.redact import redact_secrets, redact_text, redact_url


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("http://alice:pw-1@127.0.0.1:9000/v1", "http://***@127.0.0.1:9000/v1"),
        ("cannot reach https://TOKEN123@host/x (refused)", "cannot reach https://***@host/x (refused)"),
        ("org/model?revision=main&token=hf_abc", "org/model?revision=main&token=***"),
        ("s3://b/k?X-Amz-Signature=abc&x=1", "s3://b/k?X-Amz-Signature=***&x=1"),
        ("u?api_key=zz#frag", "u?api_key=***#frag"),
        ("vllm serve m --api-key s3 --max-tokens 4", "vllm serve m --api-key *** --max-tokens 4"),
        ("serve --api-key 'two words' --hf-token=xyz", "serve --api-key *** --hf-token=***"),
        ("HF_TOKEN=abc vllm serve", "HF_TOKEN=*** vllm serve"),
        ("non-default args: {'api_key': ['abc'], 'port': 8}", "non-default args: {'api_key': [***], 'port': 8}"),
        ("Namespace(api_key='abc', port=8)", "Namespace(api_key=***, port=8)"),
        ("{'token': 'abc'}", "{'token': ***}"),
        ("Authorization: Bearer abc.def", "Authorization: Bearer ***"),
        ("key sk-abcdefghijkl and hf_abcdefghijklmnopqrst", "key *** and ***"),
        ("cannot reach admin:hunter2pass@127.0.0.1:18999 (refused)", "cannot reach ***@127.0.0.1:18999 (refused)"),
        # a password with an unencoded "/", "?", "#" or "@": the userinfo is all of it, up to the last "@"
        ("at http://user:pa/ss@127.0.0.1:1 (x)", "at http://***@127.0.0.1:1 (x)"),
        ("at http://user:pa?ss@127.0.0.1:1/v1", "at http://***@127.0.0.1:1/v1"),
        ("at http://user:pa#ss@host:1", "at http://***@host:1"),
        ("at http://user:p@ss@host:1/v1", "at http://***@host:1/v1"),
    ],
)
def test_secrets_in_text(text, redacted):
    assert redact_text(text) == redacted


@pytest.mark.parametrize(
    "text",
    [
        "http://127.0.0.1:8000/health",
        "standin:dflash:gsm8k:c2",
        "--num-speculative-tokens 15 --max-tokens 12 --tokenizer t",
        "pass --api-key-env NAME",
        "energy per token: 0.5 J; output_tokens: 12",
        "git@github.com:org/repo",
        "error: /etc/passwd: not valid TOML: Expected '=' after a key",
        "C:\\keys\\api_key: missing",
        "at 12:30 on host@example",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert redact_text(text) == text


def test_argv_dicts_and_numbers():
    record = {
        "argv": ("vllm", "--api-key", "s3", "--token=t", "--max-tokens", "4"),
        "env": {"HF_TOKEN": "x", "CUDA_VISIBLE_DEVICES": "0"},
        "api_key_env": "OPENAI_API_KEY",
        "output_tokens": 12,
        "chunk_ns": list(range(5000)),
        "endpoint": "http://u:p@h:1",
    }
    out = redact_secrets(record)
    assert out["argv"] == ("vllm", "--api-key", "***", "--token=***", "--max-tokens", "4")
    assert out["env"] == {"HF_TOKEN": "***", "CUDA_VISIBLE_DEVICES": "0"}
    assert out["api_key_env"] == "OPENAI_API_KEY" and out["output_tokens"] == 12
    assert out["chunk_ns"] == record["chunk_ns"] and out["chunk_ns"] is not record["chunk_ns"]
    assert out["endpoint"] == "http://***@h:1" and record["endpoint"] == "http://u:p@h:1"


def test_values_dflashbench_sends_are_redacted_literally_in_every_form(monkeypatch):
    import base64

    from dflashbench import redact

    monkeypatch.setattr(redact, "_LITERALS", [])
    redact.remember_secret("plainKey-77")  # no pattern knows this shape
    redact.remember_url("http://admin:pa%40ss-9@host:1")  # a percent-encoded password
    redact.remember_url("https://tok3n-only@host")  # a token as the user part
    redact.remember_secret("abc")  # too short to redact literally: it would eat ordinary text
    basic = base64.b64encode(b"admin:pa@ss-9").decode()
    echoed = (f"401 Incorrect API key provided: plainKey-77; got Basic {basic} = admin:pa@ss-9, "
              f"pa%40ss-9 and {basic.rstrip('=')}; token tok3n-only; abc")  # fmt: skip
    assert redact_text(echoed) == "401 Incorrect API key provided: ***; got Basic *** = ***, *** and ***; token " \
                                  "***; abc"  # fmt: skip
    assert redact_secrets({"error": echoed})["error"] == redact_text(echoed)
    env = redact.literals_env()
    monkeypatch.setattr(redact, "_LITERALS", [])
    monkeypatch.setenv(redact.LITERALS_ENV, env[redact.LITERALS_ENV])
    redact.adopt_literals_env()  # what the server-log supervisor does
    assert redact.LITERALS_ENV not in __import__("os").environ and redact_text("key plainKey-77") == "key ***"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pa/ss@127.0.0.1:1", "http://***@127.0.0.1:1"),
        ("http://to/ken@127.0.0.1:1/v1", "http://***@127.0.0.1:1/v1"),
        ("user:pa/ss@host:8000", "***@host:8000"),
        ("https://u:p@ss@[::1", "https://***@[::1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ],
)
def test_a_url_shown_on_its_own_has_no_userinfo_whatever_its_shape(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("401 Incorrect API key provided: none.", "401 Incorrect API key provided: ***."),
        ("got 'none' (key none)", "got '***' (key ***)"),
        ("none at the start", "*** at the start"),
        # a path, an id, a flag's value, another word: what dflashbench's own text says with the same word
        ("run directory: keys/none/k_none/out", "run directory: keys/none/k_none/out"),
        ("C:\\keys\\none\\x", "C:\\keys\\none\\x"),
        ("point reference:ar:none:c1 ok", "point reference:ar:none:c1 ok"),
        ("dflashbench sweep --trace-fill none --x=none", "dflashbench sweep --trace-fill none --x=none"),
        ("nonetheless none-of-it none.txt none_x", "nonetheless none-of-it none.txt none_x"),
    ],
)
def test_a_key_that_is_a_word_goes_only_where_it_stands_as_a_word_of_free_text(monkeypatch, text, redacted):
    from dflashbench import redact

    monkeypatch.setattr(redact, "_LITERALS", [])
    redact.remember_secret("none")
    assert redact_text(text) == redacted
    assert redact_text(text, words=False) == text  # a rendered report: built from files redacted as written
    # in a record, a value without a space is a setting, a name, an id or a path: not free text
    record = redact_secrets({"trace_fill": "none", "reason": text, "argv": ["--trace-fill", "none"]})
    assert record == {"trace_fill": "none", "reason": redacted, "argv": ["--trace-fill", "none"]}


@pytest.mark.parametrize(("value", "word"), [("none", True), ("EMPTY", True), ("synthetic", True), ("k3y", True),
                                             ("speed-bench", True), ("plainKey-77", False), ("Kd93jQ0pL2", False),
                                             ("correcthorsebattery", True), ("ab7-cdefgh", False)])  # fmt: skip
def test_what_counts_as_a_word(value, word):
    from dflashbench.redact import is_word

    assert is_word(value) is word
