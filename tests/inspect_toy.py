"""An Inspect task and a deterministic offline model provider for the Inspect harness tests.

``toy/<name>`` answers sample k correctly when a hash of (name, prompt) falls below the skill
encoded in the name's digits (``toy/m70`` is right about 70% of the time), so every run of a
model scores the same on a sample. Its token usage is a function of the prompt and answer.
Environment hooks for the kill -9 tests: ``INSPECT_TOY_CALLS`` names a file that gets one line
per finished call (``model,sample prompt``); with ``INSPECT_TOY_HANG_AFTER=N`` the call after
the N-th line in that file never returns. ``INSPECT_TOY_FAIL=name:K`` makes ``toy/<name>`` raise
("the API is down") from its K-th call on (a model whose API fails); ``INSPECT_TOY_LATENCY`` (seconds)
makes every call wait that long first (an API's latency); ``INSPECT_TOY_TIMES`` names a file that gets
the time each call ends; ``INSPECT_TOY_SCORED`` names a file that gets one line per sample Inspect
has scored (``model,sample prompt``, as in the calls file), and ``INSPECT_TOY_SCORED_AT`` one that gets
the same line after the time it was scored.
"""
import hashlib
import os
import re

import anyio

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelAPI, ModelOutput, ModelUsage, modelapi
from inspect_ai.scorer import Score, Target, accuracy, match, scorer
from inspect_ai.solver import generate

N_SAMPLES = 60
CALLS_BY_MODEL: dict = {}     # calls per model name in this process (INSPECT_TOY_FAIL counts them)


def skill(name: str) -> float:
    digits = re.sub(r"\D", "", name)
    return int(digits) / 100 if digits else 0.5


def answer(name: str, prompt: str) -> str:
    """What ``toy/<name>`` answers to ``prompt`` (the exact rule the tests check against)."""
    right = prompt.rsplit("=", 1)[-1].strip()
    h = int(hashlib.sha256(f"{name}|{prompt}".encode()).hexdigest()[:8], 16) / 2**32
    return right if h < skill(name) else "no idea"


def usage(prompt: str, text: str) -> ModelUsage:
    n_in, n_out = 20 + len(prompt.split()) * 3, 2 + 5 * len(text.split())
    return ModelUsage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out)


async def _record(name: str, prompt: str) -> None:
    times = os.environ.get("INSPECT_TOY_TIMES")
    if times:
        import time

        with open(times, "a") as fh:
            fh.write(f"{time.time()}\n")
    calls = os.environ.get("INSPECT_TOY_CALLS")
    if not calls:
        return
    hang = os.environ.get("INSPECT_TOY_HANG_AFTER")
    if hang is not None:
        done = open(calls).read().count("\n") if os.path.exists(calls) else 0
        if done >= int(hang):
            await anyio.sleep(3600)      # in flight when the test kills the process; other samples go on
    with open(calls, "a") as fh:
        fh.write(f"{name},{prompt}\n")


@modelapi(name="toy")
class ToyAPI(ModelAPI):
    def __init__(self, model_name, base_url=None, api_key=None, api_key_vars=None, config=None, **model_args):
        from inspect_ai.model import GenerateConfig

        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, api_key_vars=api_key_vars or [],
                         config=config or GenerateConfig())

    async def generate(self, input, tools, tool_choice, config):
        prompt = input[-1].text
        latency = float(os.environ.get("INSPECT_TOY_LATENCY", "0") or 0)
        if latency:
            await anyio.sleep(latency)
        failing = os.environ.get("INSPECT_TOY_FAIL", "")
        count = CALLS_BY_MODEL[self.model_name] = CALLS_BY_MODEL.get(self.model_name, 0) + 1
        if failing and failing.split(":")[0] == self.model_name and count >= int(failing.split(":")[1]):
            raise RuntimeError("the API is down")
        text = answer(self.model_name, prompt)
        await _record(self.model_name, prompt)
        out = ModelOutput.from_content(model=self.model_name, content=text)
        out.usage = usage(prompt, text)
        return out


@scorer(metrics=[accuracy()])
def recorded_match():
    """``match()``, and a line in ``INSPECT_TOY_SCORED`` for each sample it has scored."""
    inner = match()

    async def score(state, target: Target) -> Score:
        result = await inner(state, target)
        with open(os.environ["INSPECT_TOY_SCORED"], "a") as fh:
            fh.write(f"{str(state.model).split('/')[-1]},{state.input_text}\n")
        if os.environ.get("INSPECT_TOY_SCORED_AT"):
            import time

            with open(os.environ["INSPECT_TOY_SCORED_AT"], "a") as fh:
                fh.write(f"{time.time()},{str(state.model).split('/')[-1]},{state.input_text}\n")
        return result

    return score


def _scorer():
    return recorded_match() if os.environ.get("INSPECT_TOY_SCORED") else match()


@task
def arithmetic():
    samples = [Sample(input=f"What is {k} times 7? answer = {7 * k}", target=str(7 * k), id=k)
               for k in range(1, N_SAMPLES + 1)]
    return Task(dataset=samples, solver=generate(), scorer=match())


def questions(n: int) -> list:
    return [Sample(input=f"What is {k} times 7? answer = {7 * k}", target=str(7 * k), id=k) for k in range(1, n + 1)]


@task
def questions_400():
    """400 questions, no manager: every sample of every model is evaluated."""
    return Task(dataset=questions(400), solver=generate(), scorer=match())


@task
def selected(log: str = "run.db", n: int = N_SAMPLES, method: str = "ucbe", batch_size: int = 6, seed: int = 0,
             stop: str = "certified", budget: int = 0, manager_only: bool = False, price: str = "", usage: str = "",
             concurrency: int = 1, epochs: int = 1):
    """The toy task under `pulse_jax.harnesses.inspect_select.select_best` (``manager_only``: the manager alone, on the
    dataset in its own order). ``concurrency`` 1 (one batch in flight) by default here: the tests
    compare the eval with a plain ask/tell loop, which only one batch at a time reproduces exactly;
    0 leaves select_best's default."""
    from inspect_ai.dataset import MemoryDataset

    from pulse_jax.harnesses.inspect_select import select_best

    options = dict(log=log, method=method, batch_size=batch_size, seed=seed, stop=stop, refit_every=0,
                   budget=budget or None, price=price or None, usage=usage or None, concurrency=concurrency or None)
    if manager_only:
        return Task(dataset=MemoryDataset(questions(n)), solver=generate(), scorer=_scorer(),
                    early_stopping=select_best(**options))
    return select_best(Task(dataset=MemoryDataset(questions(n)), solver=generate(), scorer=_scorer(), epochs=epochs),
                       **options)
