"""`memlayer.AsyncClient` against the real server: the core methods, an async pagination
walk and the error classes, executed by the same call descriptions as `Client`'s."""

import asyncio
import unittest

from support import ADMIN_KEY, URL, turn, unique

import memlayer


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        # Built outside the event loop: loading the TLS defaults is slow enough for asyncio's
        # debug mode, which these tests run in, to warn about it.
        self.client = memlayer.AsyncClient(base_url=URL, api_key=ADMIN_KEY, timeout=30)
        self.user = unique("user")
        self.session = unique("session")

    async def asyncTearDown(self):
        await self.client.aclose()

    async def test_the_core_methods(self):
        appended = await self.client.append(
            self.session,
            [turn("I am allergic to peanuts."), turn("I will remember that.", "assistant")],
            user_id=self.user,
            agent_id="chef",
        )
        self.assertEqual(appended["indices"], [0, 1])
        self.assertTrue(appended["created_session"])

        context = await self.client.context(self.session, query="snacks")
        # The facts the user stated come first, as a system message, then the turns.
        self.assertEqual([m["role"] for m in context["messages"]], ["system", "user", "assistant"])
        self.assertIn("peanuts", context["messages"][0]["content"])
        self.assertEqual(context["messages"][1]["content"], "I am allergic to peanuts.")

        made = await self.client.remember(self.user, "Allergic to peanuts", type="fact")
        self.assertEqual(made["action"], "created")
        hits = await self.client.recall(self.user, "peanuts allergy", k=3)
        self.assertEqual([h["memory_id"] for h in hits], [made["memory"]["memory_id"]])

        receipt = await self.client.forget(made["memory"]["memory_id"])
        self.assertEqual(receipt["counts"]["memories"], 1)
        self.assertEqual(await self.client.recall(self.user, "peanuts allergy"), [])

        erased = await self.client.erase_user(self.user)
        self.assertEqual(erased["session_ids"], [self.session])
        with self.assertRaises(memlayer.NotFoundError):
            await self.client.get_session(self.session)

    async def test_iterators_follow_the_pages(self):
        await self.client.append(
            self.session,
            [turn(f"note {n}") for n in range(5)],
            user_id=self.user,
            agent_id="chef",
        )
        walked = [m["index"] async for m in self.client.iter_messages(self.session, limit=2)]
        self.assertEqual(walked, [0, 1, 2, 3, 4])
        for text in ("Likes basil", "Dislikes cilantro", "Cooks on Sundays"):
            await self.client.remember(self.user, text, type="preference")
        texts = [m["text"] async for m in self.client.iter_memories(self.user, limit=1)]
        self.assertEqual(texts, ["Likes basil", "Dislikes cilantro", "Cooks on Sundays"])
        for _ in range(2):
            await self.client.create_session(self.user, "chef")
        sessions = [s async for s in self.client.iter_sessions(user_id=self.user, page_size=1)]
        self.assertEqual(len(sessions), 3)

    async def test_concurrent_requests_share_one_client(self):
        results = await asyncio.gather(
            *(
                self.client.append(
                    unique("session"), [turn(f"hi {n}")], user_id=self.user, agent_id="chef"
                )
                for n in range(8)
            )
        )
        self.assertTrue(all(r["created_session"] for r in results))
        page = await self.client.list_sessions(user_id=self.user, page_size=100)
        self.assertEqual(page["total_elements"], 8)

    async def test_errors(self):
        with self.assertRaises(memlayer.NotFoundError) as caught:
            await self.client.end(unique("missing"))
        self.assertEqual(
            (caught.exception.status, caught.exception.code), (404, "session_not_found")
        )
        with self.assertRaises(memlayer.UnprocessableError) as caught:
            await self.client.remember("not an id", "text")
        self.assertEqual((caught.exception.status, caught.exception.code), (422, "invalid_id"))
        async with memlayer.AsyncClient(URL, api_key="mlk_wrong") as wrong:
            with self.assertRaises(memlayer.UnauthorizedError) as caught:
                await wrong.recall(self.user, "anything")
        self.assertEqual(caught.exception.status, 401)


if __name__ == "__main__":
    unittest.main()
