"""The LLM-played simulated user of LiC and regret: role-play instructions in one user message, one reply out.

`ChatModelUser` holds the chat model and makes the one call both evaluations need; subclasses write the
instructions and judge the reply: LiC's user rephrases one shard (`fic.eval.lic.LLMUser`), regret's answers a
clarifying question without naming the answer (`fic.eval.clarify.user.LLMUser`). The model is anything with
`ChatModel.chat`'s interface (`fic.eval.clarify.model.ChatModel`: a local or served model under its own chat
template), or an OpenAI-compatible chat endpoint wrapped in `ChatEndpoint`.
"""

from __future__ import annotations


class ChatEndpoint:
    """An OpenAI-compatible `POST /chat/completions` endpoint behind `ChatModel.chat`'s interface.

    Only the sampling settings given are sent (a `None` seed or token limit leaves them to the server).
    """

    def __init__(self, base_url: str, model: str):
        self.base_url, self.name = base_url, model

    def chat(self, conversations: list[list[dict]], n: int = 1, temperature: float = 0.0, seed: int | None = None,
             max_new_tokens: int | None = None) -> list[list[str]]:  # fmt: skip
        from fic.generation.openai_http import chat_complete, run_sync  # fic.generation imports torch

        params = {"temperature": temperature}
        if seed is not None:
            params["seed"] = seed
        if max_new_tokens is not None:
            params["max_tokens"] = max_new_tokens

        def one(conversation: list[dict]) -> str:
            return run_sync(lambda: chat_complete(conversation, base_url=self.base_url, model=self.name, **params))

        return [[one(conversation) for _ in range(n)] for conversation in conversations]


class ChatModelUser:
    """A chat model plays the user: `say(instructions)` sends them as one user message and returns the reply.

    Args:
        model: a `ChatModel` (or anything with its `chat(conversations, n, temperature, seed, max_new_tokens)`).
        seed, max_new_tokens, temperature: the sampling settings of every reply (`None`: the model's default).
    """

    def __init__(self, model, seed: int | None = 0, max_new_tokens: int | None = 48, temperature: float = 0.0):
        self.model, self.seed, self.max_new_tokens, self.temperature = model, seed, max_new_tokens, temperature

    @property
    def name(self) -> str:
        """What resumed runs compare: `llm:<model name>`."""
        return f"llm:{getattr(self.model, 'name', type(self.model).__name__)}"

    def say(self, instructions: str) -> str:
        """The model's reply (stripped; possibly empty) to `instructions` sent as the only user message."""
        conversation = [{"role": "user", "content": instructions}]
        replies = self.model.chat(
            [conversation], temperature=self.temperature, seed=self.seed, max_new_tokens=self.max_new_tokens
        )
        return replies[0][0].strip()
