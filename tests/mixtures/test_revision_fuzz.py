"""Fuzzed revision files: always accepted or one ConfigError line naming the file; nothing else escapes."""

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mixtures
from millrace.errors import ConfigError
from testkit.fuzz import write_toml
from testkit.revisions import base

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.sampled_from(["c*q4", "c00q0", "x", "*"]), max_size=3),
    st.dictionaries(
        st.sampled_from(["c00q0", "c*q4", "q4", "q0", "c09q0", "nope", ""]),
        st.one_of(st.floats(min_value=-2, max_value=2), st.just(float("nan"))),
        max_size=4,
    ),
)


def paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from paths(value, prefix + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from paths(value, prefix + (index,))


ALL_PATHS = [p for p in paths(base()) if p]
EXTRA_KEYS = ["normalize", "description", "temperature", "tilt", "cells", "strategy", "weights", "bogus"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(
                ALL_PATHS + [("phases", i, k) for i in (0, 1) for k in EXTRA_KEYS] + [(k,) for k in EXTRA_KEYS]
            ),
            st.one_of(values, st.just("DELETE")),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_fuzzed_revisions_are_accepted_or_refused_in_one_line(revision_home, tmp_path_factory, edits):
    doc = copy.deepcopy(base())
    for path, value in edits:
        target = doc
        try:
            for key in path[:-1]:
                target = target[key]
            if value == "DELETE":
                del target[path[-1]]
            else:
                target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    file = tmp_path_factory.mktemp("fuzz") / "r1.toml"
    if not write_toml(file, doc):
        return  # not representable in TOML (None values)
    try:
        mixtures.validate_file(revision_home, file)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and str(file) in message
