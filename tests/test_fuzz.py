"""Fuzzing every decoder of user input: files (bytes), the command line, links.

The property: a layout or one ExplorerError, never another exception, within the
deadline in-process. A decoded layout must also encode to a link that decodes to
itself (or be refused as too large for a link, never printed).

``EXPLORER_FUZZ_EXAMPLES`` (default 200 per test) and ``EXPLORER_FUZZ_DEADLINE_S``
(default 2) scale a longer run: ``EXPLORER_FUZZ_EXAMPLES=3000 pytest tests/test_fuzz.py``.
"""

import copy
import json
import os
import string
from datetime import timedelta
from urllib.parse import parse_qsl, quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from explorer.__main__ import main
from explorer.errors import ExplorerError
from explorer.layout import SEED_LAYOUT, Layout, load_layout_bytes, parse_layout
from explorer.sharing.share import PARAMS, layout_to_params, layout_to_query, link_keeping_the_rest, params_to_layout

EXAMPLES = int(os.environ.get("EXPLORER_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=timedelta(seconds=float(os.environ.get("EXPLORER_FUZZ_DEADLINE_S", "2"))),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
SEED_TEXT = json.dumps(SEED_LAYOUT).encode()
SEED_QUERY = layout_to_query(parse_layout(SEED_LAYOUT)).lstrip("?")  # also warms up the models' validation

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
hostile_tokens = st.sampled_from(
    [
        "9" * 5000,
        "[" * 3000,
        "NaN",
        "-Infinity",
        "1e999",
        '"\\ud800"',
        "\u202e",
        "\x00",
        "\\",
        '"',
        "{",
        "}",
        ",",
        ":",
        "\n",
        "data\n",
        "![t](http://127.0.0.1:9/x.png)",
        "a" * 300,
        "-1",
        "0",
        "65537",
        "1e3",
        "true",
        "null",
    ]
)


def decodes_or_refuses(decode, *args) -> Layout | None:
    try:
        return decode(*args)
    except ExplorerError as error:
        assert str(error) and len(str(error)) < 2000
        return None


def link_round_trips(layout: Layout) -> None:
    try:
        query = layout_to_query(layout)
    except ExplorerError:
        return  # too large for a link: refused, never printed
    assert params_to_layout(dict(parse_qsl(query.lstrip("?")))) == layout


# --- files -------------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=4000))
def test_any_bytes(data):
    decodes_or_refuses(load_layout_bytes, data)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(SEED_TEXT)), st.integers(0, 8), st.binary(max_size=12)), min_size=1, max_size=6))
def test_the_seed_file_with_bytes_cut_and_spliced(edits):
    data = bytearray(SEED_TEXT)
    for position, cut, insert in edits:
        data[position : position + cut] = insert
    layout = decodes_or_refuses(load_layout_bytes, bytes(data))
    if layout is not None:
        link_round_trips(layout)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


SEED_PATHS = list(_paths(SEED_LAYOUT))[1:]


@FUZZ
@given(
    st.lists(st.tuples(st.sampled_from(SEED_PATHS), json_values | hostile_tokens), min_size=1, max_size=4),
    st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "latin-1", "utf-32"]),
)
def test_the_seed_file_with_fields_replaced(replacements, encoding):
    data = copy.deepcopy(SEED_LAYOUT)
    for path, value in replacements:
        node = data
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier replacement removed this path
    text = json.dumps(data)
    for _, value in replacements:
        if isinstance(value, str) and value in text:  # hostile tokens go in raw, not as JSON strings
            text = text.replace(json.dumps(value), value, 1)
    try:
        content = text.encode(encoding)
    except UnicodeEncodeError:
        content = text.encode("utf-8", errors="surrogatepass")
    layout = decodes_or_refuses(load_layout_bytes, content)
    if layout is not None:
        link_round_trips(layout)


@settings(FUZZ, max_examples=max(20, EXAMPLES // 10))
@given(
    st.binary(max_size=600) | st.sampled_from([SEED_TEXT.replace(b"8", b"9" * 5000), b"[" * 50_000, SEED_TEXT.decode().encode("utf-16")])
)
def test_the_command_line_exits_0_or_2_with_one_line(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "layout.json"
    path.write_bytes(data)
    code = main(["url", str(path)])
    assert code in (0, 2)


# --- links -------------------------------------------------------------------------------------

link_text = st.text(alphabet=string.printable + "x;:,-%\u00e9\u202e\ud7ff", max_size=60) | hostile_tokens


@FUZZ
@given(st.dictionaries(st.sampled_from(PARAMS + ("x",)), link_text))
def test_any_link(params):
    layout = decodes_or_refuses(params_to_layout, params)
    if layout is not None:
        link_round_trips(layout)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PARAMS), st.integers(0, 80), st.integers(0, 6), link_text), min_size=1, max_size=4))
def test_the_seed_link_with_text_cut_and_spliced(edits):
    params = layout_to_params(parse_layout(SEED_LAYOUT))
    for key, position, cut, insert in edits:
        value = params.get(key, "")  # the seed has no target: a splice may add one
        params[key] = value[:position] + insert + value[position + cut :]
    layout = decodes_or_refuses(params_to_layout, params)
    if layout is not None:
        link_round_trips(layout)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PARAMS), st.integers(0, 80), st.integers(0, 6), link_text), min_size=1, max_size=4))
def test_a_spliced_link_opens_what_it_can_and_names_what_it_left_out(edits):
    """Opening a link keeps every good field: a valid layout and a message per field left out, or one refusal."""
    params = layout_to_params(parse_layout(SEED_LAYOUT))
    for key, position, cut, insert in edits:
        value = params.get(key, "")
        params[key] = value[:position] + insert + value[position + cut :]
    try:
        layout, left_out = link_keeping_the_rest(params)
    except ExplorerError as error:
        assert str(error) and len(str(error)) < 2000
        return
    assert all(str(out.error) and out.instead for out in left_out)
    link_round_trips(layout)


@FUZZ
@given(st.dictionaries(st.text(max_size=12), json_values | hostile_tokens, max_size=4))
def test_any_options_in_a_link(options):
    text = ";".join(f"{quote(k, safe='')}:{quote(json.dumps(v) if not isinstance(v, str) else v, safe='')}" for k, v in options.items())
    params = {**dict(parse_qsl(SEED_QUERY)), "options": text}
    layout = decodes_or_refuses(params_to_layout, params)
    if layout is not None:
        link_round_trips(layout)


@FUZZ
@given(
    json_values | st.lists(st.integers(-2, 9), max_size=3),
    st.from_regex(r"[0-9]{1,3}x(v5p|v5litepod|v6e|v4|tpu7x|v9|h100)[-:][0-9x]{1,8}", fullmatch=True) | hostile_tokens,
)
def test_several_slices_a_fuzzed_mesh_dcn_and_target_decode_or_refuse_in_one_line(dcn, target):
    """A layout's ``mesh.dcn`` (the slices each axis spans) and an NxSLICE target: valid, or one line naming the field."""
    data = copy.deepcopy(SEED_LAYOUT)
    data["mesh"]["dcn"], data["target"] = dcn, target
    layout = decodes_or_refuses(load_layout_bytes, json.dumps(data).encode())
    if layout is not None:
        link_round_trips(layout)
