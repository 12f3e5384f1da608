"""Loading pickles that hold only plain data, without running anything they contain.

A pickle is a program: its GLOBAL / STACK_GLOBAL opcodes import any callable and REDUCE calls it,
so ``pickle.load`` on a file from a hung host runs whatever the file says (PyTorch's own Flight
Recorder analyser does exactly that).  Here every global is refused before it is imported, so only
the builtin containers and scalars pickle encodes with opcodes of their own load: dict, list,
tuple, set, str, bytes (protocol 3+; protocol 2 spells bytes as a ``_codecs.encode`` call and is
refused with it), int, float, bool and None.

* :func:`safe_loads` is the fast path: a :class:`pickle.Unpickler` whose ``find_class`` and
  ``persistent_load`` raise :class:`RefusedPickleGlobal`.
* :func:`salvage_loads` reads what a truncated or damaged pickle still holds.  It replays the
  opcodes with :func:`pickletools.genops` (which parses, never executes) on a small stack machine
  that knows only the data opcodes, and at the break folds the half-built containers into their
  parents, reporting which ones were cut short so the caller can drop them.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import warnings
from dataclasses import dataclass

from ...errors import HangforensicsError

MAX_PICKLE_BYTES = 256 * 1024 * 1024     # a full 20k-entry Flight Recorder buffer with stacks is ~60 MB


_MARK = object()
_REFUSED = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX", "EXT1", "EXT2",
            "EXT4", "PERSID", "BINPERSID", "NEXT_BUFFER", "READONLY_BUFFER"}
_EMPTY = {"EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_SET": set}
_CONST = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False, "EMPTY_TUPLE": ()}
_VALUE_OPS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT", "STRING",
              "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
              "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"}
_GET = {"GET", "BINGET", "LONG_BINGET"}
_PUT = {"PUT", "BINPUT", "LONG_BINPUT"}


class UnsafePickleError(HangforensicsError):
    """A pickle that cannot be loaded as plain data (base of the refusals below)."""


class RefusedPickleGlobal(UnsafePickleError):
    """The pickle names a global (a class or function): refused before anything is imported."""

    def __init__(self, name: str, label: str = "") -> None:
        self.name = name
        self.label = label
        where = f"{label}: " if label else ""
        super().__init__(f"{where}refused pickle global {name}")


class PickleTooLarge(UnsafePickleError):
    """The input is larger than the caller's bound."""


def _one_line(s: str) -> str:
    return " ".join(s.split())[:200]


class _RefusingUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        raise RefusedPickleGlobal(_one_line(f"{module}.{name}"))

    def persistent_load(self, pid: object) -> object:
        raise RefusedPickleGlobal(_one_line(f"persistent id {pid!r}"))


def safe_loads(data: bytes, label: str = "", max_bytes: int = MAX_PICKLE_BYTES) -> object:
    """Load a pickle of plain data; raises :class:`RefusedPickleGlobal` (one line) for any global.

    ``label`` prefixes the message (``flight recorder dump rank3: refused pickle global os.system``).
    The opcodes are checked first (:func:`_prescan`), so a global is refused before the unpickler
    starts and a damaged file never reaches it; damage raises :class:`DamagedPickle`.
    """
    if len(data) > max_bytes:
        raise PickleTooLarge(f"{label + ': ' if label else ''}pickle of {len(data)} bytes is over the "
                             f"{max_bytes}-byte bound")
    try:
        with warnings.catch_warnings():            # genops decoding a damaged protocol-0 string warns
            warnings.simplefilter("ignore", DeprecationWarning)
            _prescan(data)
        return _RefusingUnpickler(io.BytesIO(data)).load()
    except RefusedPickleGlobal as e:
        raise RefusedPickleGlobal(e.name, label) from None


class DamagedPickle(UnsafePickleError):
    """Truncated or malformed opcodes (read it with :func:`salvage_loads`)."""


def _prescan(data: bytes) -> None:
    """Walk the opcodes without running them: refuse globals, and reject what would make the C unpickler
    misbehave on a damaged file (a memo index far beyond the objects stored: it sizes its memo table
    by the index, so one flipped byte costs gigabytes and a minute)."""
    stored = 0
    recent: list[object] = []                      # the last values pushed, to name a STACK_GLOBAL
    strings: dict[int, str] = {}
    try:
        for op, arg, pos in pickletools.genops(data):
            name = op.name
            if name in _REFUSED:
                raise RefusedPickleGlobal(_global_name(name, arg, recent))
            if name in _PUT or name == "MEMOIZE":
                idx = stored if name == "MEMOIZE" else arg
                if not isinstance(idx, int) or idx > stored:
                    raise DamagedPickle(f"memo index {idx} out of order at byte {pos}")
                if recent and isinstance(recent[-1], str):
                    strings[idx] = recent[-1]
                stored = max(stored, idx + 1)
            elif name in _GET:
                if not isinstance(arg, int) or arg >= stored:
                    raise DamagedPickle(f"memo index {arg} never stored, at byte {pos}")
                recent = (recent + [strings.get(arg)])[-2:]
            elif name in _VALUE_OPS:
                recent = (recent + [arg])[-2:]
    except ValueError as e:                        # genops: truncated argument, unknown opcode, no STOP
        raise DamagedPickle(_one_line(str(e))) from None


def _global_name(op: str, arg: object, recent: list[object]) -> str:
    if op in ("GLOBAL", "INST") and isinstance(arg, str):
        return _one_line(arg.replace(" ", "."))
    if op == "STACK_GLOBAL" and len(recent) == 2 and all(isinstance(x, str) for x in recent):
        return _one_line(f"{recent[0]}.{recent[1]}")
    return _one_line(f"(opcode {op})")


@dataclass(frozen=True, slots=True)
class Salvage:
    """What :func:`salvage_loads` recovered.

    ``value`` is the outermost object (None when nothing was built); ``cut`` holds the ``id()`` of
    every container that was still being filled at the break (those may lack items or keys);
    ``complete`` is True when the pickle reached STOP; ``error`` says where it broke.
    """

    value: object
    cut: frozenset[int]
    complete: bool
    error: str | None


def _mark_index(stack: list) -> int:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is _MARK:
            return i
    raise ValueError("no MARK on the stack")


def _pop_mark(stack: list) -> list:
    i = _mark_index(stack)
    items = stack[i + 1:]
    del stack[i:]
    return items


def _set_items(target: dict, items: list) -> None:
    for k, v in zip(items[0::2], items[1::2], strict=False):   # a dangling key is dropped
        try:
            target[k] = v
        except TypeError:                          # an unhashable key: only a crafted pickle has one
            continue


def _step(name: str, arg: object, stack: list, memo: dict) -> None:
    if name in _EMPTY:
        stack.append(_EMPTY[name]())
    elif name in _CONST:
        stack.append(_CONST[name])
    elif name in _VALUE_OPS:
        stack.append(bytes(arg) if name == "BYTEARRAY8" else arg)   # no mutable bytearray in plain data
    elif name == "MARK":
        stack.append(_MARK)
    elif name in _PUT:
        memo[arg] = stack[-1]
    elif name == "MEMOIZE":
        memo[len(memo)] = stack[-1]
    elif name in _GET:
        stack.append(memo[arg])
    elif name == "APPEND":
        v = stack.pop()
        stack[-1].append(v)
    elif name == "APPENDS":
        items = _pop_mark(stack)
        stack[-1].extend(items)
    elif name == "SETITEM":
        v = stack.pop()
        k = stack.pop()
        stack[-1][k] = v
    elif name == "SETITEMS":
        items = _pop_mark(stack)
        _set_items(stack[-1], items)
    elif name == "ADDITEMS":
        items = _pop_mark(stack)
        stack[-1].update(items)
    elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
        n = int(name[-1])
        t = tuple(stack[-n:])
        if len(t) < n or any(x is _MARK for x in t):
            raise ValueError(f"{name} needs {n} items")
        del stack[-n:]
        stack.append(t)
    elif name in ("TUPLE", "LIST", "DICT", "FROZENSET"):
        items = _pop_mark(stack)
        if name == "DICT":
            d: dict = {}
            _set_items(d, items)
            stack.append(d)
        else:
            stack.append({"TUPLE": tuple, "LIST": list, "FROZENSET": frozenset}[name](items))
    elif name == "POP":
        stack.pop()
    elif name == "POP_MARK":
        _pop_mark(stack)
    elif name == "DUP":
        stack.append(stack[-1])
    elif name in ("PROTO", "FRAME", "STOP"):
        pass
    else:
        raise ValueError(f"opcode {name} is not supported")


def _fold(stack: list) -> tuple[object, set[int]]:
    """Fold a broken stack into its outermost object; the containers that were being filled are cut."""
    cut: set[int] = set()
    if stack and isinstance(stack[-1], (dict, list, set)):
        cut.add(id(stack[-1]))                     # the newest object: its filling ops may never have come
    while len(stack) > 1 or (stack and stack[-1] is _MARK):
        if _MARK in stack:
            i = _mark_index(stack)
            items = stack[i + 1:]
            del stack[i:]
            target = stack[-1] if stack else None
            if isinstance(target, dict):
                _set_items(target, items)          # a key without its value is dropped
            elif isinstance(target, list):
                target.extend(items)
            elif isinstance(target, set):
                for x in items:
                    try:
                        target.add(x)
                    except TypeError:
                        continue
            if isinstance(target, (dict, list, set)):
                cut.add(id(target))
            continue
        top = stack.pop()
        below = stack[-1]
        if isinstance(below, list):                # APPEND not reached
            below.append(top)
            cut.add(id(below))
        elif len(stack) >= 2 and isinstance(stack[-2], dict) and below.__hash__ is not None \
                and not isinstance(below, (dict, list, set)):
            key = stack.pop()                      # SETITEM not reached
            _set_items(stack[-1], [key, top])
            cut.add(id(stack[-1]))
        elif isinstance(below, dict):
            cut.add(id(below))                     # a key whose value never came
    return (stack[0] if stack else None), cut


def salvage_loads(data: bytes, max_bytes: int = MAX_PICKLE_BYTES) -> Salvage:
    """Replay the data opcodes of a possibly damaged pickle; globals raise :class:`RefusedPickleGlobal`.

    Never raises for damage: it stops at the first opcode it cannot read and folds what was built.
    """
    if len(data) > max_bytes:
        raise PickleTooLarge(f"pickle of {len(data)} bytes is over the {max_bytes}-byte bound")
    stack: list = []
    memo: dict = {}
    error: str | None = None
    complete = False
    ops = pickletools.genops(data)
    while True:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                op, arg, pos = next(ops)
        except StopIteration:
            break
        except Exception as e:                     # genops: truncated argument, unknown opcode
            error = _one_line(str(e)) or type(e).__name__
            break
        if op.name in _REFUSED:
            raise RefusedPickleGlobal(_global_name(op.name, arg, stack[-2:]))
        try:
            _step(op.name, arg, stack, memo)
        except Exception as e:                     # a malformed but parseable opcode stream
            error = _one_line(f"at byte {pos}, {op.name}: {e}")
            break
        if op.name == "STOP":
            complete = True
            break
    value, cut = _fold(stack) if not complete else ((stack[-1] if stack else None), set())
    return Salvage(value, frozenset(cut), complete, error)
