"""`memlayer.Client` against the real server: every method, pagination, and errors mapped to
their classes with the server's status and code."""

import socket
import unittest

from support import ADMIN_KEY, URL, turn, unique

import memlayer


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.client = memlayer.Client(base_url=URL, api_key=ADMIN_KEY, timeout=30)
        self.addCleanup(self.client.close)
        self.user = unique("user")
        self.session = unique("session")

    def test_append_creates_the_session_and_a_retry_is_replayed(self):
        conversation = [turn("My order 4711 is late."), turn("Sorry to hear that.", "assistant")]
        owner = {"user_id": self.user, "agent_id": "support"}
        first = self.client.append(self.session, conversation, idempotency_key="k1", **owner)
        self.assertEqual(first["session_id"], self.session)
        self.assertEqual(first["indices"], [0, 1])
        self.assertTrue(first["created_session"])
        self.assertFalse(first["replayed"])
        again = self.client.append(self.session, conversation, idempotency_key="k1", **owner)
        self.assertTrue(again["replayed"])
        self.assertEqual(again["indices"], [0, 1])
        with self.assertRaises(memlayer.ConflictError) as caught:
            self.client.append(self.session, [turn("Another request")], idempotency_key="k1")
        self.assertEqual(caught.exception.status, 409)
        later = self.client.append(self.session, [turn("Any news?")])
        self.assertEqual(later["indices"], [2])
        self.assertFalse(later["created_session"])

        session = self.client.get_session(self.session)
        self.assertEqual(session["user_id"], self.user)
        self.assertEqual(session["agent_id"], "support")
        self.assertEqual(session["message_count"], 3)
        self.assertEqual(
            [m["content"] for m in session["messages"]],
            ["My order 4711 is late.", "Sorry to hear that.", "Any news?"],
        )
        self.assertEqual([m["role"] for m in session["messages"]], ["user", "assistant", "user"])

    def test_sessions_are_created_listed_and_deleted(self):
        created = self.client.create_session(
            self.user, "support", session_id=self.session, metadata={"channel": "web"}
        )
        self.assertEqual(created["session_id"], self.session)
        self.assertEqual(created["metadata"], {"channel": "web"})
        with self.assertRaises(memlayer.ConflictError) as caught:
            self.client.create_session(self.user, "support", session_id=self.session)
        self.assertEqual(caught.exception.status, 409)
        generated = self.client.create_session(self.user, "billing")
        self.assertTrue(generated["session_id"])

        page = self.client.list_sessions(user_id=self.user, agent_id="billing")
        self.assertEqual([s["session_id"] for s in page["content"]], [generated["session_id"]])
        self.assertEqual(page["total_elements"], 1)

        self.assertIsNone(self.client.delete_session(self.session))
        with self.assertRaises(memlayer.NotFoundError):
            self.client.get_session(self.session)

    def test_iter_sessions_follows_the_pages(self):
        ids = {self.client.create_session(self.user, "support")["session_id"] for _ in range(5)}
        first = self.client.list_sessions(user_id=self.user, page_size=2)
        self.assertEqual((first["total_pages"], len(first["content"])), (3, 2))
        listed = [
            s["session_id"] for s in self.client.iter_sessions(user_id=self.user, page_size=2)
        ]
        self.assertEqual(len(listed), 5)
        self.assertEqual(set(listed), ids)

    def test_iter_messages_follows_next_from(self):
        contents = [f"message {n}" for n in range(7)]
        self.client.append(
            self.session, [turn(c) for c in contents], user_id=self.user, agent_id="support"
        )
        page = self.client.messages(self.session, limit=3)
        self.assertEqual([m["index"] for m in page["messages"]], [0, 1, 2])
        self.assertEqual(page["next_from"], 3)
        walked = list(self.client.iter_messages(self.session, limit=3))
        self.assertEqual([m["content"] for m in walked], contents)
        self.assertEqual([m["index"] for m in walked], list(range(7)))
        tail = list(self.client.iter_messages(self.session, start=5, limit=3))
        self.assertEqual([m["index"] for m in tail], [5, 6])

    def test_context_search_clear_and_end(self):
        self.client.append(
            self.session,
            [turn("I live in Lyon and I am vegetarian."), turn("Noted!", "assistant")],
            user_id=self.user,
            agent_id="support",
        )
        context = self.client.context(self.session, query="dinner ideas")
        self.assertEqual(context["format"], "openai")
        turns = [m["content"] for m in context["messages"] if m["role"] != "system"]
        self.assertEqual(turns, ["I live in Lyon and I am vegetarian.", "Noted!"])
        self.assertIn("report", context)
        text = self.client.context(
            self.session, settings={"strategy": "sliding_window", "max_turns": 1}, format="text"
        )
        self.assertEqual(text["format"], "text")
        self.assertEqual(text["settings"]["strategy"], "sliding_window")
        self.assertIn("Noted!", text["text"])
        with self.assertRaises(memlayer.UnprocessableError) as caught:
            self.client.context(self.session, settings={"strategy": "no-such-strategy"})
        self.assertEqual(caught.exception.status, 422)

        found = self.client.search(self.session, "LYON")
        self.assertEqual([hit["index"] for hit in found["hits"]], [0])

        turns = self.client.recall_turns("Lyon", user_id=self.user, k=5)
        self.assertEqual(turns["hits"][0]["session_id"], self.session)
        self.assertEqual(turns["hits"][0]["index"], 0)

        cleared = self.client.clear(self.session)
        self.assertEqual(cleared["load_from"], 2)
        after = self.client.context(self.session)["messages"]
        self.assertEqual([m for m in after if m["role"] != "system"], [])
        self.assertEqual(self.client.search(self.session, "lyon")["hits"][0]["index"], 0)

        self.assertEqual(
            self.client.end(self.session), {"session_id": self.session, "merging": True}
        )

    def test_remember_recall_and_forget(self):
        made = self.client.remember(self.user, "Prefers email over phone calls", type="preference")
        self.assertEqual(made["action"], "created")
        memory = made["memory"]
        self.assertEqual((memory["type"], memory["user_id"]), ("preference", self.user))
        same = self.client.remember(self.user, "Prefers email over phone calls", type="preference")
        self.assertEqual(same["action"], "unchanged")
        self.client.remember(self.user, "Lives in Lyon", tags=["home"])
        self.client.remember(self.user, "Has a dog named Rex", type="relationship")

        hits = self.client.recall(self.user, "email or phone", k=2)
        self.assertLessEqual(len(hits), 2)
        self.assertEqual(hits[0]["memory_id"], memory["memory_id"])
        self.assertIsInstance(hits[0]["score"], float)
        homes = self.client.recall(self.user, "where", tags=["home"])
        self.assertEqual([h["text"] for h in homes], ["Lives in Lyon"])

        first = self.client.memories(self.user, limit=2)
        self.assertEqual(len(first["memories"]), 2)
        self.assertIsNotNone(first.get("next_after"))
        walked = [m["text"] for m in self.client.iter_memories(self.user, limit=2)]
        self.assertEqual(
            walked, ["Prefers email over phone calls", "Lives in Lyon", "Has a dog named Rex"]
        )
        self.assertEqual(self.client.get_memory(memory["memory_id"])["text"], memory["text"])

        receipt = self.client.forget(memory["memory_id"])
        self.assertEqual(receipt["target"], {"kind": "memory", "memory_id": memory["memory_id"]})
        self.assertEqual(receipt["counts"]["memories"], 1)
        with self.assertRaises(memlayer.NotFoundError) as caught:
            self.client.get_memory(memory["memory_id"])
        self.assertEqual(caught.exception.status, 404)
        with self.assertRaises(memlayer.NotFoundError):
            self.client.forget(memory["memory_id"])

    def test_erase_user_answers_a_receipt_listed_with_the_erasures(self):
        self.client.append(self.session, [turn("hello")], user_id=self.user, agent_id="support")
        self.client.remember(self.user, "Likes tea")
        receipt = self.client.erase_user(self.user)
        self.assertEqual(receipt["target"], {"kind": "user", "user_id": self.user})
        self.assertEqual(receipt["session_ids"], [self.session])
        self.assertEqual(receipt["counts"]["messages"], 1)
        self.assertEqual(receipt["counts"]["memories"], 1)
        self.assertIn(receipt["erasure_id"], [r["erasure_id"] for r in self.client.erasures()])
        self.assertEqual(self.client.erasure(receipt["erasure_id"]), receipt)
        self.assertEqual(self.client.memories(self.user)["memories"], [])
        with self.assertRaises(memlayer.NotFoundError):
            self.client.get_session(self.session)

    def test_erase_message(self):
        self.client.append(
            self.session, [turn("one"), turn("two")], user_id=self.user, agent_id="support"
        )
        receipt = self.client.erase_message(self.session, 0)
        self.assertEqual(receipt["counts"]["messages"], 1)
        self.assertEqual([m["content"] for m in self.client.iter_messages(self.session)], ["two"])

    def test_keys_and_what_a_user_key_may_do(self):
        created = self.client.create_key("user", user_id=self.user, name="test key")
        self.assertTrue(created["key"].startswith("mlk_"))
        self.assertIn(created["prefix"], [k["prefix"] for k in self.client.list_keys()])
        with memlayer.Client(URL, api_key=created["key"]) as own:
            own.append(self.session, [turn("mine")], user_id=self.user, agent_id="support")
            with self.assertRaises(memlayer.ForbiddenError) as caught:
                own.append(
                    unique("session"), [turn("theirs")], user_id="someone-else", agent_id="a"
                )
            self.assertEqual(caught.exception.status, 403)
            with self.assertRaises(memlayer.ForbiddenError):
                own.create_key("service")
        revoked = self.client.revoke_key(created["prefix"])
        self.assertEqual(revoked["state"], "revoked")
        with memlayer.Client(URL, api_key=created["key"]) as own:
            with self.assertRaises(memlayer.UnauthorizedError):
                own.get_session(self.session)


class ErrorTest(unittest.TestCase):
    def setUp(self):
        self.client = memlayer.Client(URL, api_key=ADMIN_KEY)
        self.addCleanup(self.client.close)

    def test_not_found(self):
        with self.assertRaises(memlayer.NotFoundError) as caught:
            self.client.get_session(unique("missing"))
        error = caught.exception
        self.assertIsInstance(error, memlayer.MemlayerError)
        self.assertEqual((error.status, error.code), (404, "session_not_found"))
        self.assertIn("not found", error.message)
        self.assertTrue(error.request_id)

    def test_unauthorized(self):
        for key in (None, "mlk_not_a_key"):
            with memlayer.Client(URL, api_key=key) as anonymous:
                with self.assertRaises(memlayer.UnauthorizedError) as caught:
                    anonymous.list_sessions()
                self.assertEqual(
                    (caught.exception.status, caught.exception.code), (401, "unauthorized")
                )

    def test_unprocessable(self):
        with self.assertRaises(memlayer.UnprocessableError) as caught:
            self.client.get_session("not an id")
        error = caught.exception
        self.assertIsInstance(error, memlayer.InvalidRequestError)
        self.assertEqual((error.status, error.code), (422, "invalid_id"))
        with self.assertRaises(memlayer.UnprocessableError):
            self.client.recall(unique("user"), "tea", k=0)

    def test_an_id_is_one_path_segment(self):
        # A session id holding a slash may not reach another route: it is percent-encoded,
        # and the server refuses it as an id.
        with self.assertRaises(memlayer.MemlayerError) as caught:
            self.client.get_session("a/messages")
        self.assertIn(caught.exception.status, (404, 422))

    def test_no_server(self):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with memlayer.Client(f"http://127.0.0.1:{port}", api_key=ADMIN_KEY, timeout=5) as gone:
            with self.assertRaises(memlayer.APIConnectionError) as caught:
                gone.list_sessions()
        self.assertEqual((caught.exception.status, caught.exception.code), (0, "connection_error"))


if __name__ == "__main__":
    unittest.main()
