"""Request payloads are cut out of log lines the way SGLang and vLLM print them; everything else stays."""

from __future__ import annotations

import re

import pytest

from hangforensics.redaction import redact_payloads, shorten

MARK = re.compile(r"‹payload redacted: (\d+) chars›")

RECEIVE = (
    "[2026-05-01 10:00:01] Receive: obj=GenerateReqInput(validation_time=0.0012, received_time=1746093601.5, "
    "rid='5f1c2a9e0b', text='Summarise: she said \\'SECRET-ALPHA\\' and left [see {notes}] (twice)', "
    "input_ids=None, input_embeds=None, image_data=None, sampling_params={'max_new_tokens': 128, "
    "'temperature': 0.7, 'stop': ['\\n\\n']}, return_logprob=False, stream=False, lora_path=None)")
RECEIVE_OPENAI = (
    "[2026-05-01 10:00:02] Receive OpenAI: obj=ChatCompletionRequest(messages=[{'role': 'system', 'content': "
    "'You are a bot'}, {'role': 'user', 'content': \"What's SECRET-BRAVO (really)?\"}], model='qwen', "
    "max_tokens=64, stream=True)")
FINISH = (
    "[2026-05-01 10:00:03] Finish: obj=GenerateReqInput(rid='5f1c2a9e0b', text='SECRET-ALPHA prompt', "
    "input_ids=[128000, 9906, 1917]), out={'text': 'SECRET-CHARLIE answer', 'output_ids': [791, 4320, 374], "
    "'meta_info': {'id': '5f1c2a9e0b', 'finish_reason': {'type': 'stop'}, 'prompt_tokens': 3}}")
WATCHDOG_052 = (
    "[2026-05-01 10:05:00 TP0] self.cur_batch.batch_size()=2, self.cur_batch.reqs=[Req(rid=a1, "
    "input_ids=[128000, 6151, 271], output_ids=[791, 374], self.grammar=None, "
    "self.sampling_params=<sglang.srt.sampling.sampling_params.SamplingParams object at 0x7ff1bb980100>), "
    "Req(rid=b2, input_ids=[128000, 882], output_ids=[], self.grammar=None, "
    "self.sampling_params=<sglang.srt.sampling.sampling_params.SamplingParams object at 0x7ff1bb9802a0>)], "
    "available_size=261871, evictable_size=105150, ")
WATCHDOG_0510 = "scheduler.cur_batch.reqs=[Req(rid=abc, input_ids=[1, 2, 3], output_ids=[4, 5])]"
VLLM = (
    "INFO 09-01 12:00:05 [logger.py:41] Received request cmpl-8d1e-0: prompt: 'Tell me about \"SECRET-DELTA\"', "
    "params: SamplingParams(n=1, temperature=0.7, max_tokens=16), prompt_token_ids: [1, 15043, 29871], "
    "prompt_embeds shape: None, lora_request: None, prompt_adapter_request: None.")
VLLM_OUT = ("INFO 09-01 12:00:06 [logger.py:62] Generated response cmpl-8d1e-0: output: 'SECRET-ECHO', "
            "output_token_ids: [3, 4], finish_reason: stop")


def test_sglang_receive_keeps_rid_and_settings_and_hides_the_prompt():
    out = redact_payloads(RECEIVE)
    assert "SECRET-ALPHA" not in out and "notes" not in out and "twice" not in out
    assert "rid='5f1c2a9e0b'" in out
    assert "sampling_params={'max_new_tokens': 128, 'temperature': 0.7, 'stop': ['\\n\\n']}" in out
    assert "input_ids=None, input_embeds=None, image_data=None" in out     # empty values stay as they are
    assert out.endswith("return_logprob=False, stream=False, lora_path=None)")
    (n,) = MARK.findall(out)
    value = "'Summarise: she said \\'SECRET-ALPHA\\' and left [see {notes}] (twice)'"
    assert int(n) == len(value) and RECEIVE.replace(value, f"‹payload redacted: {n} chars›") == out


def test_openai_chat_messages_are_hidden_whole():
    out = redact_payloads(RECEIVE_OPENAI)
    assert "SECRET-BRAVO" not in out and "You are a bot" not in out and "'role'" not in out
    assert out.endswith("model='qwen', max_tokens=64, stream=True)")
    assert len(MARK.findall(out)) == 1


def test_finish_line_hides_prompt_ids_and_the_whole_output():
    out = redact_payloads(FINISH)
    for secret in ("SECRET-ALPHA", "SECRET-CHARLIE", "128000", "791"):
        assert secret not in out
    assert "Finish: obj=GenerateReqInput(rid='5f1c2a9e0b', text=‹payload redacted: 21 chars›, " in out
    assert out.count("‹payload redacted") == 3


@pytest.mark.parametrize("line", [WATCHDOG_052, WATCHDOG_0510])
def test_watchdog_req_dumps_keep_rids_and_pool_info(line):
    out = redact_payloads(line)
    assert "128000" not in out and "[1, 2, 3]" not in out and "[4, 5]" not in out
    assert re.findall(r"rid=(\w+)", out) == re.findall(r"rid=(\w+)", line)
    assert "self.grammar=None" in out or line is WATCHDOG_0510
    if line is WATCHDOG_052:
        assert "SamplingParams object at 0x7ff1bb980100>)" in out and out.endswith("evictable_size=105150, ")
        assert "output_ids=[]" in out                                          # an empty list hides nothing


def test_vllm_request_and_response_lines():
    out = redact_payloads(VLLM)
    assert "SECRET-DELTA" not in out and "15043" not in out
    assert "Received request cmpl-8d1e-0: prompt: ‹payload redacted" in out
    assert "params: SamplingParams(n=1, temperature=0.7, max_tokens=16)" in out
    assert out.endswith("prompt_embeds shape: None, lora_request: None, prompt_adapter_request: None.")
    out = redact_payloads(VLLM_OUT)
    assert "SECRET-ECHO" not in out and "[3, 4]" not in out and out.endswith("finish_reason: stop")


def test_truncated_lines_are_redacted_to_the_end():
    # the line was cut inside the second Req's input_ids
    cut = WATCHDOG_052[:WATCHDOG_052.index("input_ids=[128000, 882]") + len("input_ids=[128000, 8")]
    out = redact_payloads(cut)
    assert "128000" not in out and out.endswith("chars›")
    out = redact_payloads("Receive: obj=GenerateReqInput(rid='r9', text='it\\'s SECRET-FOXTROT, cut here")
    assert out == "Receive: obj=GenerateReqInput(rid='r9', text=‹payload redacted: 31 chars›"
    out = redact_payloads("Receive: obj=GenerateReqInput(rid='r9', messages=[{'role': 'user', 'content': 'SECR")
    assert "SECR" not in out and "rid='r9'" in out


def test_sglang_head_dots_tail_truncation_is_one_value():
    line = ("Receive: obj=GenerateReqInput(rid='r', text='SECRET head' ... 'tail SECRET', "
            "input_ids=[1, 2] ... [8, 9], x=1)")
    out = redact_payloads(line)
    assert "SECRET" not in out and "[8, 9]" not in out
    assert out == ("Receive: obj=GenerateReqInput(rid='r', text=‹payload redacted: 31 chars›, "
                   "input_ids=‹payload redacted: 17 chars›, x=1)")


def test_json_and_double_quoted_forms():
    line = '{"event": "request", "rid": "q1", "obj": {"text": "json \\"SECRET\\" prompt", "input_ids": [1,2], "n": 1}}'
    out = redact_payloads(line)
    assert "SECRET" not in out and "[1,2]" not in out
    assert out.startswith('{"event": "request", "rid": "q1", "obj": {"text": ‹payload redacted')
    assert out.endswith(', "n": 1}}')


def test_bare_values_calls_and_bytes():
    assert redact_payloads("Req(rid=7, text=SECRET words here, n=2)") == \
        "Req(rid=7, text=‹payload redacted: 17 chars›, n=2)"
    out = redact_payloads("x(input_embeds=tensor([[0.1, 0.2], [0.3, 0.4]]), image_data=b'\\x89PNG', rid=3)")
    assert "0.1" not in out and "PNG" not in out and out.endswith(", rid=3)")


@pytest.mark.parametrize("line", [
    "[2026-05-01 10:00:00 TP0] Decode batch, #running-req: 4, #token: 2800, token usage: 0.02, cuda graph: True, "
    "gen throughput (token/s): 512.40, #queue-req: 0",
    "[rank3]:[E501 10:04:00.634054422 ProcessGroupNCCL.cpp:709] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1558546, OpType=ALLREDUCE) ran for 240119 milliseconds before timing out.",
    "RuntimeError: connection timed out: [Errno 110] while reading output: none",
    'INFO:     10.1.2.3:40001 - "POST /generate HTTP/1.1" 200 OK',
    "server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size=4, context_length=None, "
    "skip_tokenizer_init=False, text_len=5)",
    "Receive: obj=GenerateReqInput(rid='r', text=None, input_ids=None)",
    "",
])
def test_lines_without_payload_stay_byte_identical(line):
    assert redact_payloads(line) == line


def test_redacting_twice_changes_nothing_more():
    once = redact_payloads(FINISH)
    assert redact_payloads(once) == once


def test_shorten_never_cuts_a_marker():
    text = redact_payloads("a" * 30 + " text='" + "x" * 100 + "', rid=1")
    short = shorten(text, 40)
    assert short.endswith("chars› …") and "‹payload redacted: 102 chars›" in short
    assert shorten("abc", 10) == "abc"
