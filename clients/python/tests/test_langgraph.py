"""`memlayer.langgraph.MemlayerStore` with the real langgraph-checkpoint against the real
server: LangGraph's store API (put, get, search, delete, list_namespaces, their async forms)
over memlayer's keyed memories."""

import asyncio
import json
import unittest

from langgraph.store.base import BaseStore, InvalidNamespaceError, Item, SearchItem
from support import ADMIN_KEY, URL, unique

import memlayer
from memlayer.langgraph import MemlayerStore


class StoreTest(unittest.TestCase):
    def setUp(self):
        self.client = memlayer.Client(URL, api_key=ADMIN_KEY)
        self.addCleanup(self.client.close)
        self.store = MemlayerStore(self.client)
        self.user = unique("user")

    def test_an_item_is_what_was_last_put_under_its_key(self):
        self.assertIsInstance(self.store, BaseStore)
        ns = (self.user,)
        self.assertIsNone(self.store.get(ns, "food"))
        self.store.put(ns, "food", {"likes": "pizza", "avoids": ["olives"], "since": 2019})
        # Nearly the same value under another key is another item: keyed memories never merge.
        self.store.put(ns, "food-2", {"likes": "pizza", "avoids": ["olive"], "since": 2019})
        item = self.store.get(ns, "food")
        self.assertIsInstance(item, Item)
        self.assertEqual(item.value, {"likes": "pizza", "avoids": ["olives"], "since": 2019})
        self.assertEqual((item.namespace, item.key), (ns, "food"))
        self.assertIsNotNone(item.created_at.tzinfo)

        self.store.put(ns, "food", {"likes": "sushi"})
        again = self.store.get(ns, "food")
        self.assertEqual(again.value, {"likes": "sushi"})
        self.assertEqual(again.created_at, item.created_at)
        self.assertGreaterEqual(again.updated_at, item.updated_at)
        self.assertEqual(self.store.get(ns, "food-2").value["avoids"], ["olive"])

        # It is a memlayer memory: the agent's context and recall see it.
        memory = self.client.memory_by_key(self.user, "food")
        self.assertEqual(memory["text"], '{"likes": "sushi"}')
        self.assertEqual(memory["key"], "food")
        self.assertEqual(json.loads(memory["history"][0]["text"]), item.value)

        self.store.delete(ns, "food")
        self.assertIsNone(self.store.get(ns, "food"))
        self.store.delete(ns, "food")  # Deleting what is gone is not an error.
        receipts = self.client.erasures(limit=5)
        self.assertTrue(any(r["target"].get("memory_id") == memory["memory_id"] for r in receipts))

    def test_namespaces_are_the_user_and_an_agent(self):
        self.store.put((self.user,), "tone", {"text": "formal"})
        self.store.put((self.user, "coach"), "tone", {"text": "casual"})
        self.assertEqual(self.store.get((self.user,), "tone").value, {"text": "formal"})
        self.assertEqual(self.store.get((self.user, "coach"), "tone").value, {"text": "casual"})
        self.assertIsNone(self.store.get((self.user, "tutor"), "tone"))
        self.assertIsNone(self.store.get((unique("other"),), "tone"))

        everything = self.store.search((self.user,))
        self.assertEqual(
            sorted((i.namespace, i.value["text"]) for i in everything),
            [((self.user,), "formal"), ((self.user, "coach"), "casual")],
        )
        coach = self.store.search((self.user, "coach"))
        self.assertEqual([(i.namespace, i.key) for i in coach], [((self.user, "coach"), "tone")])
        self.assertEqual(
            self.store.list_namespaces(prefix=(self.user,)),
            [(self.user,), (self.user, "coach")],
        )
        self.assertEqual(self.store.list_namespaces(prefix=(self.user,), max_depth=1), [(self.user,)])
        with self.assertRaises(NotImplementedError):
            self.store.list_namespaces()
        for bad in [(), ("a", "b", "c")]:
            with self.assertRaises(InvalidNamespaceError):
                self.store.put(bad, "k", {"x": 1})

    def test_search_ranks_by_meaning_and_filters_values(self):
        ns = (self.user,)
        self.store.put(ns, "pet", {"text": "Has a golden retriever called Biscuit", "kind": "pet"})
        self.store.put(ns, "job", {"text": "Works as a nurse on night shifts", "kind": "work"})
        self.store.put(ns, "city", {"text": "Lives in Lyon near the river", "kind": "home", "floor": 3})
        # A memory remembered without a key is not an item.
        self.client.remember(self.user, "Plays the cello", type="fact")

        hits = self.store.search(ns, query="what dog does the user have?", limit=2)
        self.assertIsInstance(hits[0], SearchItem)
        self.assertEqual(hits[0].key, "pet")
        self.assertIsNotNone(hits[0].score)
        self.assertLessEqual(len(hits), 2)

        listed = self.store.search(ns)
        self.assertEqual([i.key for i in listed], ["pet", "job", "city"])
        self.assertEqual([i.key for i in self.store.search(ns, offset=1, limit=1)], ["job"])
        self.assertEqual([i.key for i in self.store.search(ns, filter={"kind": "work"})], ["job"])
        self.assertEqual(
            [i.key for i in self.store.search(ns, filter={"floor": {"$gte": 2}})], ["city"]
        )
        self.assertEqual(
            [i.key for i in self.store.search(ns, filter={"kind": {"$ne": "pet"}})], ["job", "city"]
        )

    def test_the_async_methods_run_on_the_async_client(self):
        async def scenario():
            async with memlayer.AsyncClient(URL, api_key=ADMIN_KEY) as client:
                store = MemlayerStore(async_client=client)
                ns = (self.user, "planner")
                await store.aput(ns, "trip", {"to": "Kyoto", "month": "April"})
                item = await store.aget(ns, "trip")
                self.assertEqual(item.value, {"to": "Kyoto", "month": "April"})
                hits = await store.asearch(ns, query="travel plans to Japan")
                self.assertEqual([h.key for h in hits], ["trip"])
                self.assertEqual(await store.alist_namespaces(prefix=(self.user,)), [ns])
                await store.adelete(ns, "trip")
                self.assertIsNone(await store.aget(ns, "trip"))
                with self.assertRaises(RuntimeError):
                    store.get(ns, "trip")

        asyncio.run(scenario())


if __name__ == "__main__":
    unittest.main()
