"""${VAR} expansion rules."""

from __future__ import annotations

import pytest

from supervisor.config._envsubst import ExpansionError, expand

ENV = {"A": "alpha", "EMPTY": "", "N": "3"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        ("${A}", "alpha"),
        ("x-${A}-y", "x-alpha-y"),
        ("${A}${N}", "alpha3"),
        ("${MISSING:-dflt}", "dflt"),
        ("${EMPTY:-dflt}", "dflt"),
        ("${EMPTY-dflt}", ""),
        ("${MISSING-dflt}", "dflt"),
        ("${A:-dflt}", "alpha"),
        ("${MISSING:-}", ""),
        ("${MISSING:-${A}}", "alpha"),
        ("${MISSING:-a ${N} b}", "a 3 b"),
        ("${A:-${UNSET}}", "alpha"),  # an unused default is not evaluated
        ("${A:?never shown}", "alpha"),
        ("$$", "$"),
        ("$${A}", "${A}"),
        ("cost: $$5", "cost: $5"),
        ("echo $HOME", "echo $HOME"),  # a shell's business, left alone
        ("trailing $", "trailing $"),
        ("${MISSING:-a:b-c}", "a:b-c"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, ENV) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${MISSING}", "environment variable MISSING is not set and ${MISSING} has no default"),
        (
            "${EMPTY:?must not be empty}",
            "environment variable EMPTY is required: must not be empty",
        ),
        ("${MISSING?}", "environment variable MISSING is required: not set"),
        ("${A", "invalid variable reference in '${A' after ${A: expected '}'"),
        ("${}", "invalid variable reference"),
        ("${1A}", "invalid variable reference"),
        ("${A:-unclosed", "unterminated variable reference"),
        ("${A:+x}", "invalid variable reference"),
    ],
)
def test_expand_errors(text: str, message: str) -> None:
    with pytest.raises(ExpansionError) as caught:
        expand(text, ENV)
    assert message in str(caught.value)
