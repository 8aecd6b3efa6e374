"""The schemathesis command line, with one CPython bug worked around.

Hypothesis describes a filtered strategy by parsing the source of its lambda. On CPython 3.11
(the machine image's `python3`), parsing from deep inside schemathesis's schema walker can
raise `SystemError: AST constructor recursion depth mismatch` (CPython issue gh-106905, fixed
in later releases), which schemathesis reports as a run error although nothing about the API
was found. The description is only for people reading a repr, so on that error it becomes
the one Hypothesis itself uses when it cannot tell.
"""

import sys

from hypothesis.internal import lambda_sources

_describe = lambda_sources._lambda_description


def _described(f, *args, **kwargs):
    try:
        return _describe(f, *args, **kwargs)
    except SystemError:
        return "lambda: <unknown>"


lambda_sources._lambda_description = _described

from schemathesis.cli import schemathesis  # noqa: E402  (after the patch it must see)

if __name__ == "__main__":
    sys.argv[0] = "schemathesis"
    sys.exit(schemathesis())
