"""Request payloads (prompts, token ids, generated text) cut out of log text before a report shows it.

Pure functions, no I/O.  The database keeps the original text; only what a
report renders goes through :func:`redact_payloads` (unless the operator asks
for ``--show-payloads``).

Forms covered, as SGLang and vLLM print them:

- ``key=value``: ``Receive: obj=GenerateReqInput(rid='…', text='…', input_ids=[…])``,
  ``Finish: obj=…, out={…}``, watchdog ``….cur_batch.reqs=[Req(rid=…, input_ids=[…], output_ids=[…])]``,
  ``ChatCompletionRequest(messages=[…])``;
- ``'key': value`` / ``"key": value``: dict reprs and JSON;
- ``key: value`` with a quoted or bracketed value: vLLM ``Received request cmpl-…: prompt: '…',
  params: SamplingParams(…), prompt_token_ids: […]`` and ``Generated response …: output: '…'``;
- vLLM's input dump on an engine exception: ``Dumping scheduler output for model execution:
  SchedulerOutput(scheduled_new_reqs=[NewRequestData(req_id=…,prompt_token_ids=[…],…)], …
  new_token_ids=[[…]] …)``.

A value is a quoted string (either quote, backslash escapes), a balanced
``[…]``/``{…}``/``(…)``/``<…>``, a call like ``tensor([…])``, or a bare token up
to the next separator; SGLang's truncated form ``'head' ... 'tail'`` is one
value.  A value the line cuts off (no closing quote or bracket) is redacted to
the end of the line: when in doubt, redact more.
"""

from __future__ import annotations

import re

PAYLOAD_KEYS: tuple[str, ...] = (
    "text", "prompt", "input_text", "origin_input_text", "output_text", "decoded_text", "input",
    "input_ids", "output_ids", "origin_input_ids", "origin_output_ids", "fill_ids", "prompt_token_ids",
    "output_token_ids", "messages", "content", "input_embeds", "prompt_embeds", "image_data", "audio_data",
    "video_data", "multi_modal_data", "out", "output",
    # vLLM's input dump on an engine exception (``Dumping scheduler output``: NewRequestData /
    # CachedRequestData reprs): prompt and generated token ids, multimodal inputs, draft tokens
    "token_ids", "new_token_ids", "all_token_ids", "spec_token_ids", "scheduled_spec_decode_tokens",
    "mm_inputs", "mm_features", "mm_kwargs",
)
# the bare ``key: value`` form also reads as English ("timed out: [Errno 110]"): only these keys, and only
# with a quoted or bracketed value
_COLON_KEYS = tuple(k for k in PAYLOAD_KEYS if k not in ("out", "input"))

MARK = "‹payload redacted: {n} chars›"
_KEEP = {"None", "null", "''", '""', "[]", "{}", "()"}     # empty values carry nothing worth hiding


def _alt(keys: tuple[str, ...]) -> str:
    return "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))


_KEY_START = re.compile(
    rf"""(?<![\w'"])(?:(?P<q>['"])(?:{_alt(PAYLOAD_KEYS)})(?P=q)[ \t]*:[ \t]*"""
    rf"""|(?:{_alt(PAYLOAD_KEYS)})[ \t]*=(?!=)[ \t]*"""
    rf"""|(?:{_alt(_COLON_KEYS)}):[ \t]+(?=[bBrRuU]?['"\[{{(]))""")
_STRING_PREFIX = re.compile(r"[bBrRuU]{1,2}(?=['\"])")
_CALL = re.compile(r"[A-Za-z_][\w.]*(?=[(\[{])")
_ELLIPSIS = re.compile(r"[ \t]*\.\.\.[ \t]*(?=[bBrRuU]?['\"\[{(])")
_BARE_END = re.compile(r"[,)\]}\n]")
_CLOSE = {"(": ")", "[": "]", "{": "}", "<": ">"}


def _string_end(s: str, i: int) -> int:
    """End (exclusive) of the quoted string opening at ``i``; the end of the line when unterminated."""
    q = s[i]
    j = i + 1
    n = len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == q:
            return j + 1
        if c == "\n":
            return j
        j += 1
    return n


def _balanced_end(s: str, i: int) -> int:
    """End (exclusive) of the bracketed value opening at ``i``, skipping strings; the line's end when unbalanced."""
    stack = [_CLOSE[s[i]]]
    j = i + 1
    n = len(s)
    while j < n:
        c = s[j]
        if c == "\n":
            return j
        if c in "'\"" and stack[-1] != ">":
            j = _string_end(s, j)
            if j >= n or s[j - 1] != c:
                return j                      # unterminated string: the value runs to the line's end
            continue
        if c in "([{" or (c == "<" and stack[-1] == ">"):
            stack.append(_CLOSE[c])
        elif c == stack[-1]:
            stack.pop()
            if not stack:
                return j + 1
        j += 1
    return n


def _one_value_end(s: str, i: int) -> int:
    if i >= len(s):
        return i
    m = _STRING_PREFIX.match(s, i)
    if m:
        i = m.end()
    c = s[i]
    if c in "'\"":
        return _string_end(s, i)
    if c in _CLOSE:
        return _balanced_end(s, i)
    m = _CALL.match(s, i)
    if m:                                     # tensor([...]), Image(...)
        return _balanced_end(s, m.end())
    m = _BARE_END.search(s, i)
    end = m.start() if m else len(s)
    while end > i and s[end - 1] in " \t":    # trailing blanks belong to the separator
        end -= 1
    return end


def value_end(s: str, i: int) -> int:
    """End (exclusive) of the payload value starting at ``i``, including SGLang's ``head ... tail`` truncation."""
    end = _one_value_end(s, i)
    while True:
        m = _ELLIPSIS.match(s, end)
        if not m:
            return end
        end = _one_value_end(s, m.end())


def redact_payloads(text: str) -> str:
    """``text`` with the value of every payload key replaced by a marker giving its length; else unchanged."""
    if not text:
        return text
    out: list[str] = []
    pos = 0
    scan = 0
    while True:
        m = _KEY_START.search(text, scan)
        if m is None:
            break
        start = m.end()
        if text.startswith("‹payload redacted", start):
            scan = start
            continue
        end = value_end(text, start)
        value = text[start:end]
        if not value or value in _KEEP:
            scan = max(end, start)
            continue
        out.append(text[pos:start])
        out.append(MARK.format(n=len(value)))
        pos = scan = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, never inside a redaction marker."""
    if len(text) <= limit:
        return text
    cut = limit
    opened = text.rfind("‹", 0, cut)
    if opened >= 0 and text.find("›", opened, cut) < 0:
        closed = text.find("›", cut)
        cut = closed + 1 if closed >= 0 else cut
    return text[:cut] + " …"
