"""OpenAI-compatible HTTP: the `/v1/completions` backend and a shared chat-completions helper.

The backend posts raw prompts to `/v1/completions` (the chat endpoint applies the server's template and cannot be
made to write a *user* turn), one request per prompt carrying `n`, so a vLLM / SGLang server shares the prefill.
Requests run concurrently on one `httpx.AsyncClient`, at most `concurrency` in flight (an `asyncio.Semaphore`).

Retries (shared by everything here, the LLM judge included): 429, 408, 5xx, timeouts, connection errors, truncated
bodies and 200 replies that are not the expected JSON are retried up to `max_retries` times with exponential backoff
and jitter, waiting `Retry-After` seconds instead when the server sends it. Any other 4xx fails at once with an
`OpenAIHTTPError` that carries the status and the start of the body. The API key (argument or `$OPENAI_API_KEY`)
only travels in the `Authorization` header; it is never logged or put in an error message.

Sync callers use `generate()`, which works with or without a running event loop (inside one, e.g. a notebook, it
runs the requests on a fresh loop in a worker thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import random
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
from tqdm.auto import tqdm

from fic.errors import FicError
from fic.generation.base import (
    Backend,
    SamplingParams,
    check_prompts,
    cut_at_stop,
    derive_seed,
    one_greedy_sample,
    repeat_greedy,
)

logger = logging.getLogger(__name__)

_EXCERPT = 300


class OpenAIHTTPError(FicError, RuntimeError):
    """A request that failed for good: a non-retryable status, or retries exhausted (`status` None for no reply)."""

    def __init__(self, message: str, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.status, self.body = status, body


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date; fall back to our own backoff
        return None


def run_sync(make_coro: Callable[[], Coroutine[Any, Any, Any]]):
    """Run a coroutine to completion from sync code, whether or not this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coro())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make_coro())).result()


class OpenAIEndpoint:
    """
    An OpenAI-compatible server: bounded concurrency and retries around `POST {base_url}/{path}`.

    Use as `async with OpenAIEndpoint(...) as ep: await ep.post("completions", payload)`; the `httpx.AsyncClient`
    belongs to the event loop that entered the context.

    Args:
        base_url: the API root including its version prefix, as with the OpenAI SDK (`http://localhost:8000/v1`).
        api_key: bearer token; defaults to `$OPENAI_API_KEY`; none is sent when neither is set (local servers).
        concurrency: most requests in flight at once.
        timeout: seconds per request attempt (connect, read and write each).
        max_retries: retries after the first attempt for retryable failures.
        backoff_base, backoff_max: attempt `k` waits `min(backoff_max, backoff_base * 2**k)` times a jitter factor
            in [0.5, 1]; a `Retry-After` header replaces that (capped at `backoff_max`).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url={base_url!r} must be an http(s) URL such as 'http://localhost:8000/v1'.")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency={concurrency!r} must be an integer >= 1.")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries={max_retries!r} must be an integer >= 0.")
        if timeout <= 0:
            raise ValueError(f"timeout={timeout!r} must be > 0 seconds.")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.concurrency, self.timeout, self.max_retries = concurrency, float(timeout), max_retries
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self._client: httpx.AsyncClient | None = None
        self._semaphore: asyncio.Semaphore | None = None

    def __repr__(self) -> str:  # no key in reprs or logs
        key = "set" if self._api_key else "none"
        return f"{type(self).__name__}(base_url={self.base_url!r}, api_key=<{key}>, concurrency={self.concurrency})"

    async def __aenter__(self) -> OpenAIEndpoint:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout),
            headers=headers,
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
        )
        self._semaphore = asyncio.Semaphore(self.concurrency)
        return self

    async def __aexit__(self, *exc) -> None:
        await self._client.aclose()
        self._client = self._semaphore = None

    async def post(self, path: str, payload: dict, validate: Callable[[dict], None] | None = None) -> dict:
        """POST JSON with retries; `validate(data)` may raise ValueError to mark a 200 reply as malformed (retried)."""
        if self._client is None:
            raise RuntimeError("OpenAIEndpoint.post() outside `async with OpenAIEndpoint(...) as endpoint:`.")
        url = f"{self.base_url}/{path.lstrip('/')}"
        async with self._semaphore:
            for attempt in range(self.max_retries + 1):
                try:
                    return await self._attempt(url, payload, validate)
                except _Retryable as err:
                    if attempt == self.max_retries:
                        raise OpenAIHTTPError(
                            f"POST {url} failed after {attempt + 1} attempts; last error: {err}. Check that the "
                            "server is up and not overloaded, or raise max_retries / timeout."
                        ) from None
                    delay = min(self.backoff_max, self.backoff_base * 2**attempt) * random.uniform(0.5, 1.0)
                    if err.retry_after is not None:
                        delay = min(err.retry_after, self.backoff_max)
                    logger.warning("POST %s: %s; retry %d/%d in %.2fs", url, err, attempt + 1, self.max_retries, delay)
                    await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _attempt(self, url: str, payload: dict, validate) -> dict:
        try:
            response = await self._client.post(url, json=payload)
        except httpx.TimeoutException as e:
            raise _Retryable(f"timeout after {self.timeout:g}s ({type(e).__name__})") from None
        except httpx.TransportError as e:  # refused / reset connections, truncated bodies
            raise _Retryable(f"{type(e).__name__}: {e}") from None
        status, body = response.status_code, response.text
        if status == 429 or status == 408 or status >= 500:
            raise _Retryable(f"HTTP {status}: {body[:_EXCERPT]!r}", _retry_after(response))
        if status >= 400:
            hint = " (is base_url the API root with its version prefix, e.g. '.../v1'?)" if status == 404 else ""
            raise OpenAIHTTPError(f"POST {url} -> HTTP {status}{hint}: {body[:_EXCERPT]}", status, body[:_EXCERPT])
        try:
            data = response.json()
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, got {type(data).__name__}")
            if validate is not None:
                validate(data)
        except ValueError as e:
            raise _Retryable(f"malformed reply ({e}): {body[:_EXCERPT]!r}") from None
        return data

    async def chat_complete(self, messages: list[dict], model: str, **params) -> str:
        """`POST /chat/completions` and return the first choice's message content (`params`: temperature, ...)."""
        data = await self.post("chat/completions", {"model": model, "messages": messages, **params}, _check_chat)
        return data["choices"][0]["message"]["content"]


def _check_chat(data: dict) -> None:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("no choices[0].message.content") from None
    if not isinstance(content, str):
        raise ValueError("choices[0].message.content is not a string")


async def chat_complete(
    messages: list[dict],
    model: str,
    base_url: str | None = None,
    endpoint: OpenAIEndpoint | None = None,
    api_key: str | None = None,
    timeout: float = 60.0,
    max_retries: int = 5,
    **params,
) -> str:
    """
    One chat completion with the shared retry policy; returns the assistant message text.

    Pass an open `endpoint` to share its client and concurrency limit across many calls (what a judge should do),
    or `base_url` for a one-off request. `params` go into the request body (temperature, max_tokens, seed,
    response_format, ...).
    """
    if endpoint is not None:
        return await endpoint.chat_complete(messages, model, **params)
    if base_url is None:
        raise ValueError("chat_complete() needs endpoint= (an open OpenAIEndpoint) or base_url=.")
    async with OpenAIEndpoint(
        base_url, api_key=api_key, concurrency=1, timeout=timeout, max_retries=max_retries
    ) as ep:
        return await ep.chat_complete(messages, model, **params)


class OpenAICompletionsBackend(Backend):
    """
    Generate through an OpenAI-compatible `/v1/completions` endpoint (vLLM or SGLang server, TGI, hosted APIs).

    Args:
        base_url: API root with its version prefix, e.g. `http://localhost:8000/v1`.
        model: the model name the server serves.
        api_key: bearer token; defaults to `$OPENAI_API_KEY`.
        concurrency, timeout, max_retries: see `OpenAIEndpoint`.
        send_skip_special_tokens: send vLLM/SGLang's `skip_special_tokens` field so the server keeps (or drops)
            special tokens as `keep_special_tokens` asks; set False for servers that reject unknown fields.
        extra_body: more request fields, merged last (e.g. `{"top_k": 20}`).
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 5,
        send_skip_special_tokens: bool = True,
        extra_body: dict | None = None,
        **endpoint_kw,
    ):
        self.model = model
        self.send_skip_special_tokens = send_skip_special_tokens
        self._one_choice_per_request = False  # set when the server turns out to ignore `n`
        self.extra_body = dict(extra_body or {})
        self._endpoint_args = dict(
            base_url=base_url, api_key=api_key, concurrency=concurrency, timeout=timeout, max_retries=max_retries,
            **endpoint_kw,
        )  # fmt: skip
        self.endpoint = OpenAIEndpoint(**self._endpoint_args)  # validates the arguments now

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, endpoint={self.endpoint!r})"

    def max_context(self) -> int | None:
        """The served model's `max_model_len` from `GET {base_url}/models` (vLLM's model card carries it; other servers
        may not: None then)."""
        if not hasattr(self, "_max_context"):
            self._max_context = None
            endpoint = self.endpoint
            headers = {"Authorization": f"Bearer {endpoint._api_key}"} if endpoint._api_key else {}
            try:
                cards = httpx.get(f"{endpoint.base_url}/models", headers=headers, timeout=endpoint.timeout).json()
                card = next(c for c in cards.get("data", []) if c.get("id") == self.model)
                length = card.get("max_model_len")
                self._max_context = length if isinstance(length, int) and length > 0 else None
            except (httpx.HTTPError, ValueError, AttributeError, StopIteration) as err:
                logger.info("%s/models gives no context length for %r (%s)", endpoint.base_url, self.model, err)
        return self._max_context

    def _generate(self, prompts, params, progress, keep_special_tokens) -> list[list[str]]:
        return run_sync(lambda: self.agenerate(prompts, params, progress, keep_special_tokens))

    def payload(self, prompt: str, index: int, params: SamplingParams, keep_special_tokens: bool = True) -> dict:
        """The request body for prompt number `index`."""
        body = {
            "model": self.model,
            "prompt": prompt,
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "seed": derive_seed(params.seed, index) % 2**31,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if self.send_skip_special_tokens:
            body["skip_special_tokens"] = not keep_special_tokens
        body.update(self.extra_body)
        return body

    async def agenerate(
        self,
        prompts: list[str],
        params: SamplingParams,
        progress: bool = False,
        keep_special_tokens: bool = True,
    ) -> list[list[str]]:
        """The async form of `generate()`."""
        prompts = check_prompts(prompts)
        asked, params = params, one_greedy_sample(params)
        results: list[list[str] | None] = [None] * len(prompts)

        def validate(data: dict) -> None:
            choices = data.get("choices")
            if not isinstance(choices, list) or len(choices) != params.n:
                got = len(choices) if isinstance(choices, list) else "no"
                raise ValueError(f"expected {params.n} choices, got {got}")
            if not all(isinstance(c, dict) and isinstance(c.get("text"), str) for c in choices):
                raise ValueError("a choice has no text")

        async with OpenAIEndpoint(**self._endpoint_args) as endpoint:
            with tqdm(total=len(prompts), desc="generate", disable=not progress) as bar:

                async def ask(i: int, prompt: str, sampling: SamplingParams, check) -> dict:
                    try:
                        return await endpoint.post("completions", self.payload(prompt, i, sampling,
                                                                               keep_special_tokens), check)  # fmt: skip
                    except OpenAIHTTPError as err:
                        # `transformers serve` refuses vLLM's field with 422 "Unexpected fields": stop sending it.
                        if err.status not in (400, 422) or "skip_special_tokens" not in (err.body or ""):
                            raise
                        logger.warning("The server refuses `skip_special_tokens`; no longer sending it")
                        self.send_skip_special_tokens = False
                        return await endpoint.post("completions", self.payload(prompt, i, sampling,
                                                                               keep_special_tokens), check)  # fmt: skip

                async def one(i: int, prompt: str) -> None:
                    if self._one_choice_per_request and params.n > 1:
                        texts = await many(i, prompt)
                    else:
                        try:
                            data = await ask(i, prompt, params, validate)
                            texts = [c["text"] for c in sorted(data["choices"], key=lambda c: c.get("index", 0))]
                        except OpenAIHTTPError as err:
                            if params.n == 1 or "expected" not in str(err) or "got 1" not in str(err):
                                raise
                            # A server that ignores `n` (transformers serve): one request per sample instead.
                            logger.warning("The server ignores n=%d; asking once per sample", params.n)
                            self._one_choice_per_request = True
                            texts = await many(i, prompt)
                    # The server already stops at `stop`; cutting again is a no-op there and a guard elsewhere.
                    results[i] = [cut_at_stop(text, params.stop) for text in texts]
                    bar.update(1)

                async def many(i: int, prompt: str) -> list[str]:
                    texts = []
                    for j in range(params.n):
                        single = dataclasses.replace(params, n=1, seed=derive_seed(params.seed, i, j))
                        data = await ask(i, prompt, single, None)
                        texts.append(data["choices"][0]["text"])
                    return texts

                try:
                    async with asyncio.TaskGroup() as group:  # the first failure cancels the rest
                        for i, prompt in enumerate(prompts):
                            group.create_task(one(i, prompt))
                except BaseExceptionGroup as group_error:
                    raise group_error.exceptions[0] from None
        return repeat_greedy(results, asked)
