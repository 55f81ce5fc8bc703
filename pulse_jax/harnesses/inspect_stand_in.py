"""An offline Inspect model provider and task for trying ``inspect eval ... --model a,b,c`` with no API.

``pulse-stand-in/<candidate>`` answers as the built-in benchmark's candidate of that name
(`pulse_jax.stand_in`): right on example ``k`` exactly when that candidate's score there is 1. It
counts tokens by words (no tokenizer to download). The provider is registered with Inspect through
pulse-jax's ``inspect_ai`` entry point, so the ``inspect`` command line finds it; the task
`stand_in_questions` asks one question per example::

    inspect eval task.py --model pulse-stand-in/candidate-023,pulse-stand-in/candidate-002

where ``task.py`` wraps the task in `pulse_jax.select_best` (docs/harness.md, "Offline, from the
command line").
"""
from __future__ import annotations

import re

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelAPI, ModelOutput, ModelUsage, modelapi
from inspect_ai.scorer import match
from inspect_ai.solver import generate

from pulse_jax import stand_in

_EXAMPLE = re.compile(r"stand-in example (\d+):")


def questions(n: int = 200) -> list:
    """One sample per example of the built-in benchmark (ids 0..n-1), with its expected answer."""
    return [Sample(input=f"stand-in example {k}: what is {k} times 7?", target=str(7 * k), id=k) for k in range(n)]


@task
def stand_in_questions(n: int = 200):
    """The stand-in's questions as a plain Inspect task (no selection)."""
    return Task(dataset=questions(n), solver=generate(), scorer=match())


@modelapi(name="pulse-stand-in")
class StandInAPI(ModelAPI):
    """``pulse-stand-in/<candidate>``: the built-in benchmark's candidate, offline."""

    def __init__(self, model_name, base_url=None, api_key=None, api_key_vars=None, config=None, **model_args):
        from inspect_ai.model import GenerateConfig

        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, api_key_vars=api_key_vars or [],
                         config=config or GenerateConfig())
        stand_in.check([model_name], 0)      # an unknown candidate is refused in one line

    async def generate(self, input, tools, tool_choice, config):
        prompt = input[-1].text
        found = _EXAMPLE.search(prompt)
        k = int(found.group(1)) if found else -1
        right = found is not None and stand_in.score(self.model_name, [k])[0] >= 0.5
        text = str(7 * k) if right else "I do not know"
        out = ModelOutput.from_content(model=self.model_name, content=text)
        n_in, n_out = len(prompt.split()), len(text.split())
        out.usage = ModelUsage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out)
        return out

    async def count_text_tokens(self, text: str) -> int:
        return len(text.split())      # words: no tokenizer to download offline
