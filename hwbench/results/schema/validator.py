"""A validator of the JSON Schema subset hwbench's schemas use, driven by the schema itself.

A results file of 200,000 records is checked in about 1.2 s on a slow two-core machine
(6 µs a record), where a general JSON Schema library takes tens of seconds, and nothing
beyond the standard library is needed.
Two parts, both made from the schema:

- :class:`Validator` walks a document beside the schema, keyword by keyword, and says
  where and what each problem is;
- before it enters an object or array, it asks that part's *quick check*: a Python
  function per object, array or ``$ref`` target, written from the schema when the
  validator is made, true only when the value is valid. The whole document's check has
  the checks of its parts written into it, so a valid document is answered by one call;
  the walk spells out the problems of the parts the checks do not pass.

Keywords: ``type``, ``enum``, ``const``, ``minimum``, ``exclusiveMinimum``, ``minLength``,
``format`` (``date-time``: RFC 3339), ``properties``, ``required``, ``additionalProperties``,
``items``, ``$ref`` (``#/...``) and ``if``/``then``/``else``; annotations (``title``,
``description``, ...) are ignored. A schema using any other keyword or format is refused
when the validator is made, so none is silently left unchecked. One rule beyond JSON
Schema: every number is finite as a double, where the schema gives its type and where it
leaves the value free (an object's keys beyond its ``properties``, an array without
``items``): JSON has no NaN or infinity, though Python's parser reads them, and an integer
beyond a double's range (about 1.8e308) breaks every figure computed from it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hwbench.results.schema.values import (
    BEYOND_DOUBLE,
    Problem,
    all_finite,
    finite,
    free_numbers,
    is_date_time,
    is_number,
    not_finite,
    show,
)

Schema = Mapping[str, Any]

ANNOTATIONS = frozenset(
    {"$schema", "$id", "$defs", "$comment", "title", "description", "default", "examples", "deprecated"}
)
STRUCTURE = frozenset({"properties", "required", "additionalProperties", "items", "if", "then", "else"})
VALUES = frozenset({"type", "enum", "const", "minimum", "exclusiveMinimum", "minLength", "format"})
FORMATS = frozenset({"date-time"})
UNKNOWN_KEY = "(not in this schema_version: a newer hwbench may have written it)"
#: How many blocks deep the checks of nested parts are written into one quick check (Python nests 20 at most).
INLINE_DEPTH = 12


def _is_integer(value: Any) -> bool:
    return is_number(value) and (isinstance(value, int) or float(value).is_integer())


#: JSON types: the test of each and how a message names it.
TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "null": (lambda v: v is None, "null"),
    "boolean": (lambda v: isinstance(v, bool), "true or false"),
    "string": (lambda v: isinstance(v, str), "a string"),
    "integer": (_is_integer, "an integer"),
    "number": (is_number, "a number"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "array": (lambda v: isinstance(v, list), "an array"),
}


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true and 1 differ, 1 and 1.0 do not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if is_number(a) and is_number(b):
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def format_path(path: tuple[str | int, ...]) -> str:
    """``records[3].timing.median_s`` for ``("records", 3, "timing", "median_s")``; ``(top)`` for ``()``.

    A key that is not a plain name is shown quoted (``shape['a b']``), its odd characters escaped.
    """
    text = ""
    for part in path:
        if isinstance(part, int) or not part.isidentifier():
            text += f"[{part!r}]"
        else:
            text += f".{part}" if text else part
    return text or "(top)"


def _types(node: Schema) -> list[str] | None:
    kind = node.get("type")
    return [kind] if isinstance(kind, str) else kind


def value_problems(node: Schema, value: Any) -> list[str]:
    """What is wrong with ``value`` under the plain-value keywords of ``node`` (type, enum, bounds, ...)."""
    types = _types(node)
    if types is not None and not any(TYPES[t][0](value) for t in types):
        return [f"{show(value)} is not {' or '.join(TYPES[t][1] for t in types)}"]
    found = []
    options = node["enum"] if "enum" in node else [node["const"]] if "const" in node else None
    if options is not None and not any(_same(value, o) for o in options):
        shown = ", ".join("null" if o is None else str(o) for o in options)
        found.append(f"{show(value)} is not {shown}" if len(options) == 1 else f"{show(value)} is not one of {shown}")
    if is_number(value):
        if types is not None and not finite(value):  # a typed number (a free one is checked as free)
            found.append(not_finite(value))
        if "minimum" in node and value < node["minimum"]:
            found.append(f"{show(value)} is below the minimum {node['minimum']!r}")
        if "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]:
            found.append(f"{show(value)} is not above {node['exclusiveMinimum']!r}")
    if isinstance(value, str):
        if "minLength" in node and len(value) < node["minLength"]:
            n = node["minLength"]
            found.append(f"{show(value)} must not be empty" if n == 1 else f"{show(value)} is shorter than {n}")
        if node.get("format") == "date-time" and not is_date_time(value):
            found.append(f"{show(value)} is not an RFC 3339 date-time such as 2026-01-02T03:04:05+00:00")
    return found


class _QuickChecks:
    """Python source of one quick check per object, array or reference of a schema.

    A check is a function of plain statements that return False at the first term that
    fails. The check of the whole document has the checks of the objects and arrays inside
    written into it, down to :data:`INLINE_DEPTH` blocks (deeper, or where a reference leads
    back, they are calls); the check of each part, which the walk asks, calls those inside.
    A required key is read directly (a missing one raises KeyError: False), an optional
    one only when the object has more keys than the required ones, and a closed object
    counts its known keys instead of comparing key sets.
    """

    def __init__(self, validator: Validator) -> None:
        self.validator = validator
        self.names: dict[int, str] = {}
        self.source: list[str] = []
        self.constants: dict[str, Any] = {}
        self.temps = 0
        self.open: set[int] = set()  # the nodes being written: a reference back to one is a call
        self.deep = False

    def constant(self, value: Any) -> str:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def temp(self) -> str:
        self.temps += 1
        return f"_t{self.temps}"

    def function(self, node: Schema, deep: bool = False) -> str:
        """The name of the quick check of ``node`` (written once; a reference may lead back to it).

        A ``deep`` one has the checks of the parts inside written into it; the others call theirs.
        """
        if id(node) not in self.names:
            name = self.names[id(node)] = f"_quick{len(self.names)}"
            opened, (was, self.deep) = id(node) not in self.open, (self.deep, deep)
            self.open.add(id(node))
            body = self.block(node, "v", 2)
            self.deep = was
            if opened:
                self.open.discard(id(node))
            self.source += [f"def {name}(v):", "    try:", *body, "        return True"]
            self.source += ["    except KeyError:", "        return False", ""]
        return self.names[id(node)]

    def inline(self, node: Schema, x: str, depth: int) -> list[str]:
        """Lines at ``depth`` that return False unless the value named ``x`` is valid under ``node``."""
        if self.validator.plain(node):
            return self.block(node, x, depth)
        if not self.deep or id(node) in self.open or depth > INLINE_DEPTH:
            return [f"{'    ' * depth}if not {self.function(node)}({x}): return False"]
        self.open.add(id(node))
        try:
            return self.block(node, x, depth)
        finally:
            self.open.discard(id(node))

    def block(self, node: Schema, x: str, depth: int) -> list[str]:
        pad = "    " * depth
        lines = self.inline(self.validator.resolve(node["$ref"]), x, depth) if "$ref" in node else []
        terms = self.values(node, x)
        if terms:
            lines.append(f"{pad}if not ({' and '.join(terms)}): return False")
        types = _types(node)
        if _free(node):
            lines.append(f"{pad}if not _all_finite({x}): return False")
        if "properties" in node or "required" in node or "additionalProperties" in node:
            lines += self.guarded(types == ["object"], "dict", x, depth, lambda d: self.object(node, x, d))
        elif "object" in (types or ()):  # an object of free keys
            lines.append(f"{pad}if _isinstance({x}, dict) and not _all_finite({x}): return False")
        if "array" in (types or ()) and "items" not in node:  # an array of free items
            lines.append(f"{pad}if _isinstance({x}, list) and not _all_finite({x}): return False")
        if "items" in node:

            def each(d: int) -> list[str]:
                return [f"{'    ' * d}for _y{depth} in {x}:", *self.inline(node["items"], f"_y{depth}", d + 1)]

            lines += self.guarded(types == ["array"], "list", x, depth, each)
        if "if" in node:  # the quick check of the condition may say False where it holds: then the walk decides
            test = f"{self.function(node['if'])}({x}) or _valid({self.constant(node['if'])}, {x})"
            lines.append(f"{pad}if {test}:")
            for word in ("then", "else"):
                lines += [f"{pad}else:"] if word == "else" else []
                lines += (self.inline(node[word], x, depth + 1) if word in node else []) or [f"{pad}    pass"]
        return lines

    def guarded(self, typed: bool, kind: str, x: str, depth: int, body: Callable[[int], list[str]]) -> list[str]:
        """``body`` as it is where the type of ``x`` was checked, else only for a ``kind`` (a subclass: False)."""
        if typed:
            return body(depth)
        pad = "    " * depth
        return [f"{pad}if _type({x}) is {kind}:", *body(depth + 1), f"{pad}elif _isinstance({x}, {kind}): return False"]

    def values(self, node: Schema, x: str) -> list[str]:
        """Terms of the plain-value keywords: each type's test with the bounds that apply to it."""
        terms = []
        types = _types(node)
        low = [f"{node['minimum']!r} <= {x}"] if "minimum" in node else []
        low += [f"{node['exclusiveMinimum']!r} < {x}"] if "exclusiveMinimum" in node else []
        text = [f"len({x}) >= {node['minLength']!r}"] if "minLength" in node else []
        text += [f"_date_time({x})"] if node.get("format") == "date-time" else []
        if types is not None:
            bounds = [(k, self.bound(node[k])) for k in ("minimum", "exclusiveMinimum") if k in node]
            real = [f"{b} {'<=' if k == 'minimum' else '<'} {x}" for k, b in bounds]  # float with float: faster
            real = [*real, f"{x} < _INF"] if real else [f"-_INF < {x} < _INF"]  # a NaN fails either
            bounded = bounds and all(node[k] >= -BEYOND_DOUBLE for k, _ in bounds)  # below: no integer either
            low = [f"{x} < {BEYOND_DOUBLE}" if bounded else f"{-BEYOND_DOUBLE} < {x} < {BEYOND_DOUBLE}", *low]
            each = {
                "null": [f"{x} is None"],
                "boolean": [f"({x} is True or {x} is False)"],
                "string": [f"_type({x}) is str", *text],
                "integer": [f"_type({x}) is int", *low],
                "number": [f"_type({x}) is float and {' and '.join(real)} or _type({x}) is int", *low],
                "object": [f"_type({x}) is dict"],
                "array": [f"_type({x}) is list"],
            }
            ordered = sorted(types, key=lambda t: t != "null")  # the cheapest test first
            terms.append("(" + " or ".join("(" + " and ".join(each[t]) + ")" for t in ordered) + ")")
        else:
            terms += [f"(not _is_number({x}) or {t})" for t in low]
            terms += [f"(not _isinstance({x}, str) or {t})" for t in text]
        if "enum" in node or "const" in node:
            options = list(node["enum"]) if "enum" in node else [node["const"]]
            if all(o is None or isinstance(o, str) for o in options):
                terms.append(f"({x} is None or _type({x}) is str) and {x} in {self.constant(frozenset(options))}")
            else:
                terms.append(f"_in_enum({x}, {self.constant(tuple(options))})")
        return terms

    def bound(self, value: Any) -> str:
        """A bound to compare a float with: a float literal where that is the same number, else the value."""
        try:
            same = isinstance(value, (int, float)) and math.isfinite(value) and float(value) == value
        except OverflowError:  # an integer beyond any float
            same = False
        return repr(float(value)) if same else self.constant(value)

    def object(self, node: Schema, x: str, depth: int) -> list[str]:
        pad, more = "    " * depth, "    " * (depth + 1)
        props: Mapping[str, Schema] = node.get("properties", {})
        required = set(node.get("required", ()))
        extra = node.get("additionalProperties", True)
        lines = []
        if required - props.keys():
            lines.append(f"{pad}if not {x}.keys() >= {self.constant(frozenset(required - props.keys()))}: return False")
        present = [key for key in props if key in required]
        for key in present:
            t = self.temp()
            lines += [f"{pad}{t} = {x}[{key!r}]", *self.inline(props[key], t, depth)]
        count, rest = self.temp(), []  # rest: the checks of the keys beyond the required ones
        for key in (k for k in props if k not in required):
            t = self.temp()
            check = self.inline(props[key], t, depth + 2)
            if check or extra is False:
                rest.append(f"{more}if {key!r} in {x}:")
                rest += [f"{more}    {count} += 1"] if extra is False else []
                rest += [f"{more}    {t} = {x}[{key!r}]", *check] if check else []
        if isinstance(extra, Mapping):
            key, y = f"_key{depth}", f"_y{depth + 1}"
            if props:
                known = self.constant(frozenset(props))
                rest += [f"{more}for {key}, {y} in {x}.items():", f"{more}    if {key} not in {known}:"]
                rest += self.inline(extra, y, depth + 3) or [f"{more}        pass"]
            else:
                rest += [f"{more}for {y} in {x}.values():", *(self.inline(extra, y, depth + 2) or [f"{more}    pass"])]
        elif extra is True and "type" in node:  # free keys beside the known ones (a typed object's own)
            rest += [f"{more}for _key{depth}, _y{depth + 1} in {x}.items():"]
            rest += [
                f"{more}    if _key{depth} not in {self.constant(frozenset(props))} and not _all_finite(_y{depth + 1}):"
            ]
            rest += [f"{more}        return False"]
        if extra is False:
            rest = [f"{more}{count} = {len(present)}", *rest, f"{more}if len({x}) != {count}: return False"]
        return [*lines, f"{pad}if len({x}) != {len(present)}:", *rest] if rest else lines


def _free(node: Schema) -> bool:
    """Whether ``node`` leaves its value free: no keyword but annotations."""
    return not node.keys() - ANNOTATIONS


def _subschemas(node: Any) -> Iterator[Schema]:
    """``node`` and every schema within it (under ``properties``, ``items``, ``$defs``, ...)."""
    if not isinstance(node, Mapping):
        return
    yield node
    for key in ("items", "if", "then", "else", "additionalProperties"):
        yield from _subschemas(node.get(key))
    for group in ("properties", "$defs"):
        for sub in node.get(group, {}).values():
            yield from _subschemas(sub)


class Validator:
    """Checks documents against one JSON Schema of the subset above; its quick checks are compiled when made."""

    def __init__(self, schema: Schema) -> None:
        self.root = schema
        nodes = list(_subschemas(schema))
        for node in nodes:
            self._refuse_unknown(node)
        quick = _QuickChecks(self)
        entry = quick.function(schema, deep=True)
        for node in nodes:  # a check of its own for every part the walk enters, to pass its valid parts at once
            if not self.plain(node):
                quick.function(node)
        self.source = "\n".join(quick.source)
        namespace: dict[str, Any] = {
            **quick.constants,
            "_INF": math.inf,
            "_all_finite": all_finite,
            "_isinstance": isinstance,
            "_type": type,
            "_is_number": is_number,
            "_in_enum": lambda value, options: any(_same(value, o) for o in options),
            "_date_time": is_date_time,
            "_valid": lambda node, value: not self._problems(node, value),
        }
        # The source is the one written above from the schema, never text from a document.
        exec(compile(self.source, "<hwbench schema quick checks>", "exec"), namespace)
        self._quick: dict[int, Callable[[Any], bool]] = {key: namespace[name] for key, name in quick.names.items()}
        self._entry = namespace[entry]

    def _refuse_unknown(self, node: Schema) -> None:
        """ValueError for a keyword or format this validator does not check in ``node`` (its own keywords)."""
        unknown = node.keys() - ANNOTATIONS - STRUCTURE - VALUES - {"$ref"}
        if unknown:
            raise ValueError(f"schema keyword(s) {', '.join(sorted(unknown))} not supported by this validator")
        if "format" in node and node["format"] not in FORMATS:
            raise ValueError(f"schema format {node['format']!r} not supported by this validator")
        if "$ref" in node:
            self.resolve(node["$ref"])

    def resolve(self, ref: str) -> Schema:
        """The node a ``$ref`` names (``#/$defs/NAME``, or any ``#/...`` path)."""
        if not ref.startswith("#"):
            raise ValueError(f"schema $ref {ref!r}: only references into the same schema (#/...) are supported")
        node: Any = self.root
        for part in ref[2:].split("/") if ref != "#" else ():
            node = node[part]
        return node

    def plain(self, node: Schema) -> bool:
        """Whether ``node`` checks plain values only (no object, array or conditional keyword, nor such a reference)."""
        if STRUCTURE & node.keys():
            return False
        return "$ref" not in node or self.plain(self.resolve(node["$ref"]))

    def is_valid(self, doc: Any) -> bool:
        """Whether ``doc`` is valid (the quick checks, then the walk where they do not pass)."""
        return not self.problems(doc)

    def problems(self, doc: Any) -> list[Problem]:
        """Every problem of ``doc``: ``(path, message)``, in document order."""
        return [] if self._entry(doc) else self._problems(self.root, doc)

    def errors(self, doc: Any) -> list[str]:
        """Every problem of ``doc`` as a line ``PATH: MESSAGE`` (empty when valid)."""
        return [f"{format_path(path)}: {message}" for path, message in self.problems(doc)]

    def _problems(self, node: Schema, value: Any) -> list[Problem]:
        found: list[Problem] = []
        self._walk(node, value, (), found)
        return found

    def _walk(self, node: Schema, value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
        quick = self._quick.get(id(node))
        if quick is not None and quick(value):
            return
        if "$ref" in node:
            self._walk(self.resolve(node["$ref"]), value, path, out)
        problems = value_problems(node, value)
        out += [(path, p) for p in problems]
        types = _types(node)
        if problems and types is not None and not any(TYPES[t][0](value) for t in types):
            return  # of the wrong type: nothing more to say about its contents
        if _free(node):
            out += free_numbers(value, path)
        if isinstance(value, dict):
            self._walk_object(node, value, path, out)
        if isinstance(value, list) and "items" in node:
            for i, item in enumerate(value):
                self._walk(node["items"], item, (*path, i), out)
        elif isinstance(value, list) and types is not None:  # free items
            out += free_numbers(value, path)
        if "if" in node:
            branch = "else" if self._problems(node["if"], value) else "then"
            if branch in node:
                self._walk(node[branch], value, path, out)

    def _walk_object(
        self, node: Schema, value: dict[str, Any], path: tuple[str | int, ...], out: list[Problem]
    ) -> None:
        props: Mapping[str, Schema] = node.get("properties", {})
        out += [(path, f"{key!r} is required") for key in node.get("required", ()) if key not in value]
        extra = node.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                self._walk(props[key], item, (*path, key), out)
            elif extra is False:
                out.append((path, f"unknown key {show(key)} {UNKNOWN_KEY}"))
            elif isinstance(extra, Mapping):
                self._walk(extra, item, (*path, key), out)
            elif "type" in node:  # a free key of a typed object
                out += free_numbers(item, (*path, key))
