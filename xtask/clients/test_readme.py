"""The README's Python snippets of one "Use it from your stack" section, run as a reader would
paste them, against the real server that `cargo xtask clients` starts.

Usage: test_readme.py "SECTION TITLE" [REPLY ...]

Each ```python block of the section (indented ones in list items too) runs in turn in one
namespace, so a later block may use what an earlier one made. What a reader would fill in is
filled in, and nothing else is changed: the README's address of the server
(http://127.0.0.1:7700) becomes the test server's, its key placeholder (`mlk_…`) the test
server's admin key, and `my_model`, the reader's own model call, answers a fixed text. Each
REPLY is queued at the fake model (`fake-upstream`) first, as the answers the snippets' chat
completions get. Fails when the section has no snippet, or when one raises.
"""

import json
import os
import re
import sys
import textwrap
import urllib.request
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = re.compile(r"^( *)```python\n(.*?)^\1```$", re.S | re.M)


def section(title):
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def snippets(title):
    return [textwrap.dedent(match.group(2)) for match in FENCE.finditer(section(title))]


def queue(reply):
    request = urllib.request.Request(
        f"{os.environ['FAKE_UPSTREAM_CONTROL']}/replies",
        data=json.dumps({"text": reply}).encode(),
        method="POST",
        headers={"content-type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=30).close()


def main(title, replies):
    found = snippets(title)
    if not found:
        print(f"README.md: no ```python snippet under '## {title}'")
        return 1
    for reply in replies:
        queue(reply)
    namespace = {"my_model": lambda messages: "Your order ships tomorrow."}
    for number, snippet in enumerate(found, 1):
        code = snippet.replace("http://127.0.0.1:7700", os.environ["MEMLAYER_URL"]).replace(
            "mlk_…", os.environ["MEMLAYER_ADMIN_KEY"]
        )
        exec(compile(code, f"README.md: {title}, snippet {number}", "exec"), namespace)
        print(f"\nREADME.md: {title}, snippet {number} ... ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
