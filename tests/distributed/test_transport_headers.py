"""Message headers from another rank are checked before this rank allocates anything for them."""
import json

import pytest

import fxkit
from fxkit.distributed.transport import decode, encode, parse_header
from fxkit.errors import PipelineError


def _raw(arrays, tree=None, j=0):
    return json.dumps({"j": j, "tree": tree or {"value": None}, "arrays": arrays}).encode()


def test_a_valid_header_parses():
    header, arrays = encode([fxkit.randn(2, 3)], 5)
    parsed = parse_header(header, "rank 0 (stage 0)")
    assert parsed["j"] == 5 and parsed["arrays"] == [[[2, 3], "<f4"]]
    assert decode(parsed, arrays)[0].shape == (2, 3)


@pytest.mark.parametrize("raw, message", [
    (_raw([[[4], "|O"]]), r"gives array 0 the dtype '\|O', which is no dtype of fxkit tensors"),
    (_raw([[[4], "V8"]]), r"gives array 0 the dtype 'V8', which is no dtype of fxkit tensors"),
    (_raw([[[4], "not a dtype"]]), r"gives array 0 the dtype 'not a dtype'"),
    (_raw([[[10 ** 15, 10 ** 6], "<f4"]]), r"announces arrays of 4000000000000000000000 bytes in all \(array 0 "
                                           r"has shape \[1000000000000000, 1000000\]\), more than this machine's"),
    (_raw([[[-1], "<f4"]]), r"describes array 0 as \[\[-1\], '<f4'\]"),
    (_raw([[[2.5], "<f4"]]), r"describes array 0 as"),
    (b"\xff\xfe", r"is no JSON"),
    (b"[" * 100_000, r"is no JSON"),
    (json.dumps({"tree": {}, "arrays": []}).encode(), r"lacks the micro-batch number"),
])
def test_headers_that_would_allocate_objects_or_too_much_are_refused(raw, message):
    with pytest.raises(PipelineError, match=r"the message header from rank 1 \(stage 1\) " + message):
        parse_header(raw, "rank 1 (stage 1)")


@pytest.mark.parametrize("tree", [{"array": 3}, {"array": -1}, {"nothing": 1}, {"value": {"a": 1}},
                                  {"tuple": 5}])
def test_malformed_value_trees_are_pipeline_errors(tree):
    with pytest.raises(PipelineError, match=r"a received message's values are malformed"):
        decode({"tree": tree}, [])


def test_the_limit_is_configurable():
    with pytest.raises(PipelineError, match=r"announces arrays of 400 bytes in all"):
        parse_header(_raw([[[100], "<f4"]]), "rank 1", limit=100)
