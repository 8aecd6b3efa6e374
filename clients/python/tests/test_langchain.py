"""`memlayer.langchain.MemlayerChatMessageHistory` with the real langchain-core against the
real server: LangChain's messages in and out, clear, the async methods, and
`RunnableWithMessageHistory` keeping a conversation in memlayer."""

import unittest
import warnings

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from support import ADMIN_KEY, URL, unique

import memlayer
from memlayer.langchain import MemlayerChatMessageHistory


class ChatHistoryTest(unittest.TestCase):
    def setUp(self):
        self.client = memlayer.Client(URL, api_key=ADMIN_KEY)
        self.addCleanup(self.client.close)
        self.user = unique("user")
        self.session = unique("session")
        self.history = MemlayerChatMessageHistory(
            self.client, self.session, user_id=self.user, agent_id="assistant"
        )

    def test_messages_round_trip_through_the_session(self):
        self.assertIsInstance(self.history, BaseChatMessageHistory)
        self.assertEqual(self.history.messages, [])
        self.history.add_messages(
            [
                SystemMessage(content="Be brief."),
                HumanMessage(content="What's the weather in Lyon?"),
                AIMessage(content="Let me look."),
                ToolMessage(content="Sunny, 21°C", tool_call_id="call_1"),
            ]
        )
        self.history.add_user_message("Thanks!")
        self.history.add_ai_message("You're welcome.")

        stored = self.client.get_session(self.session)
        self.assertEqual((stored["user_id"], stored["agent_id"]), (self.user, "assistant"))
        self.assertEqual(
            [m["role"] for m in stored["messages"]],
            ["system", "user", "assistant", "tool", "user", "assistant"],
        )
        self.assertEqual(stored["messages"][3]["metadata"], {"tool_call_id": "call_1"})

        messages = self.history.messages
        self.assertEqual(
            [type(m) for m in messages],
            [SystemMessage, HumanMessage, AIMessage, ToolMessage, HumanMessage, AIMessage],
        )
        self.assertEqual(messages[1].content, "What's the weather in Lyon?")
        self.assertEqual(messages[3].tool_call_id, "call_1")
        self.assertEqual(messages[5].content, "You're welcome.")

    def test_clear_empties_the_history_and_keeps_the_messages_searchable(self):
        self.history.add_messages(
            [HumanMessage(content="My cat is called Miso."), AIMessage(content="Cute!")]
        )
        self.history.clear()
        self.assertEqual(self.history.messages, [])
        self.history.add_user_message("Hello again")
        self.assertEqual([m.content for m in self.history.messages], ["Hello again"])
        hits = self.client.search(self.session, "miso")["hits"]
        self.assertEqual([h["index"] for h in hits], [0])
        # Clearing a session that was never written is no error.
        MemlayerChatMessageHistory(self.client, unique("never")).clear()

    def test_text_parts_are_stored_as_text(self):
        self.history.add_messages(
            [
                HumanMessage(
                    content=[{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
                )
            ]
        )
        self.assertEqual(self.history.messages[0].content, "Hello there")
        with self.assertRaises(ValueError):
            self.history.add_messages(
                [
                    HumanMessage(
                        content=[{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
                    )
                ]
            )

    def chain(self, runnable):
        return RunnableWithMessageHistory(
            runnable,
            lambda session_id: MemlayerChatMessageHistory(
                self.client, session_id, user_id=self.user, agent_id="assistant"
            ),
            input_messages_key="input",
            history_messages_key="history",
        )

    def test_runnable_with_message_history_keeps_the_conversation(self):
        model = FakeListChatModel(responses=["Hi Dana!", "Your name is Dana."])
        prompt = ChatPromptTemplate.from_messages(
            [MessagesPlaceholder(variable_name="history"), ("human", "{input}")]
        )
        seen = []

        def record(prompt_value):
            seen.append(prompt_value.to_messages())
            return prompt_value

        with warnings.catch_warnings():
            # langchain-core deprecates it for LangGraph's persistence, but it is still how
            # a BaseChatMessageHistory is used.
            warnings.simplefilter("ignore")
            chain = self.chain(prompt | record | model)
        config = {"configurable": {"session_id": self.session}}
        self.assertEqual(chain.invoke({"input": "I'm Dana."}, config=config).content, "Hi Dana!")
        answer = chain.invoke({"input": "What's my name?"}, config=config)
        self.assertEqual(answer.content, "Your name is Dana.")
        self.assertEqual([m.content for m in seen[1]], ["I'm Dana.", "Hi Dana!", "What's my name?"])
        stored = [m["content"] for m in self.client.iter_messages(self.session)]
        self.assertEqual(stored, ["I'm Dana.", "Hi Dana!", "What's my name?", "Your name is Dana."])


class AsyncChatHistoryTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        # Built outside the event loop, as in test_async.
        self.client = memlayer.Client(URL, api_key=ADMIN_KEY)
        self.async_client = memlayer.AsyncClient(URL, api_key=ADMIN_KEY)
        self.session = unique("session")

    async def asyncTearDown(self):
        await self.async_client.aclose()
        self.client.close()

    async def test_async_methods_use_the_async_client(self):
        history = MemlayerChatMessageHistory(
            self.client,
            self.session,
            user_id=unique("user"),
            agent_id="assistant",
            async_client=self.async_client,
        )
        self.assertEqual(await history.aget_messages(), [])
        await history.aadd_messages([HumanMessage(content="ping"), AIMessage(content="pong")])
        self.assertEqual([m.content for m in await history.aget_messages()], ["ping", "pong"])
        await history.aclear()
        self.assertEqual(await history.aget_messages(), [])
        self.assertEqual(history.messages, [])


if __name__ == "__main__":
    unittest.main()
