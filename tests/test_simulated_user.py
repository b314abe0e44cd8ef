"""The LLM-played simulated user shared by LiC and regret (`fic.eval.simulated_user`): one call, two subclasses."""

from mock_openai_server import MockOpenAIServer

from fic.eval import lic
from fic.eval.clarify.user import DONT_KNOW
from fic.eval.clarify.user import LLMUser as RegretUser
from fic.eval.simulated_user import ChatModelUser


class FakeChat:
    """`ChatModel.chat`'s interface; records the calls and answers with a fixed reply."""

    name = "fake"

    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def chat(self, conversations, n=1, temperature=0.0, seed=0, max_new_tokens=None):
        self.calls.append({"conversations": conversations, "temperature": temperature, "seed": seed,
                           "max_new_tokens": max_new_tokens})  # fmt: skip
        return [[self.reply] * n for _ in conversations]


def test_both_users_are_one_chat_model_user():
    assert issubclass(lic.LLMUser, ChatModelUser) and issubclass(RegretUser, ChatModelUser)
    user = ChatModelUser(FakeChat("  Sure, it is red.\n"), seed=3, max_new_tokens=20)
    assert user.say("Play a user.") == "Sure, it is red." and user.name == "llm:fake"
    call = user.model.calls[0]
    assert call["conversations"] == [[{"role": "user", "content": "Play a user."}]]
    assert (call["seed"], call["max_new_tokens"], call["temperature"]) == (3, 20, 0.0)


def test_regret_user_replaces_an_empty_reply():
    from test_regret_scenarios import phones

    from fic.eval.clarify.products import ProductScenario

    chat = FakeChat("   ")
    assert RegretUser(ProductScenario(), phones(), "terse", chat, seed=5).respond("Which brand?") == DONT_KNOW
    assert chat.calls[0]["seed"] == 5 and chat.calls[0]["max_new_tokens"] == 48
    assert "The assistant now asks: Which brand?" in chat.calls[0]["conversations"][0][0]["content"]


def test_lic_user_rephrases_a_shard_through_a_chat_endpoint():
    task = lic.LiCTask("t", "Full.", ["What is b?", "a is 3."], check=lambda text: True)
    with MockOpenAIServer(chat_reply=" By the way, a is 3. ") as server:
        user = lic.LLMUser(server.url, "sim")
        assert user.reveal(task, 1, []) == "By the way, a is 3." and user.name == "llm:sim"
        body = server.requests[0]["body"]
    assert body["model"] == "sim" and body["temperature"] == 0.0 and "a is 3." in body["messages"][0]["content"]
    assert "seed" not in body and "max_tokens" not in body  # as before: left to the server
