"""What the tests share: the server `cargo xtask clients` started (MEMLAYER_URL, with the
admin key MEMLAYER_ADMIN_KEY), and ids no other test uses, since they all share its store."""

import os
import uuid

URL = os.environ["MEMLAYER_URL"]
ADMIN_KEY = os.environ["MEMLAYER_ADMIN_KEY"]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def turn(content: str, role: str = "user") -> dict:
    return {"role": role, "content": content}
